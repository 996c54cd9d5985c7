"""The PII guard's precision and recall on a generated corpus with near misses.

Run from the repository root with the project's virtualenv:

    .venv/bin/python bench/guardrails/corpus.py [--per-kind 200] [--seed 7]

Sentences carry one item each: personal data a guard must find (Luhn-valid card numbers,
mod-97-valid IBANs, US SSNs in the valid ranges, phone numbers, e-mail and IP addresses,
MAC addresses), or a near miss it must leave alone (order numbers and digit runs that fail
Luhn, an IBAN with a wrong check, SSN-shaped numbers in ranges never issued, dates, times,
version strings, ZIP codes, invoice and tracking numbers, ISBNs, commit hashes, amounts).
The scanner is the guard's own (guardrails/pii.py, with its pre-filter), at the default
entity types and score threshold (api/guardrails.py). Prints per entity type: precision,
recall, and what was found where nothing should be; per near-miss kind: how often it was
flagged, and as what.
"""

from __future__ import annotations

import argparse
import random
import statistics
import string
import time
from collections import Counter
from collections.abc import Callable

from llm_operator.api.guardrails import DEFAULT_PII_ENTITIES
from llm_operator.guardrails.pii import PiiScanner

THRESHOLD = 0.4  # PiiGuardSpec.score_threshold's default

TEMPLATES = (
    "Hi team, as discussed the reference is {} and I need it sorted by Friday.",
    "Please update the record: {}. Thanks for the quick help earlier.",
    "The customer wrote that {} was on the form they sent yesterday.",
    "Can you check {} against what we have on file?",
    "{} - that is what the ticket says, nothing else.",
)

Make = Callable[[random.Random], str]


def digits(r: random.Random, n: int) -> str:
    return "".join(r.choice(string.digits) for _ in range(n))


def luhn_digit(body: str) -> str:
    total = 0
    for i, ch in enumerate(reversed(body)):
        d = int(ch)
        if i % 2 == 0:
            d = d * 2 - 9 if d * 2 > 9 else d * 2
        total += d
    return str((10 - total % 10) % 10)


def card(r: random.Random, valid: bool = True) -> str:
    body = r.choice(["4", "51", "52", "53", "54", "55"])
    body += digits(r, 15 - len(body))
    check = luhn_digit(body)
    if not valid:
        check = str((int(check) + r.randint(1, 9)) % 10)
    number = body + check
    sep = r.choice([" ", "-", ""])
    return sep.join(number[i:i + 4] for i in range(0, 16, 4))


def iban(r: random.Random, valid: bool = True) -> str:
    country, bban = r.choice([("DE", lambda: digits(r, 18)),
                              ("GB", lambda: "".join(r.choice(string.ascii_uppercase)
                                                     for _ in range(4)) + digits(r, 14)),
                              ("FR", lambda: digits(r, 23))])
    account = bban()
    moved = account + country + "00"
    number = int("".join(str(int(c, 36)) for c in moved))
    check = 98 - number % 97
    if not valid:
        check = (check + r.randint(1, 50)) % 97 + 2
    code = f"{country}{check:02d}{account}"
    return " ".join(code[i:i + 4] for i in range(0, len(code), 4)) if r.random() < 0.5 \
        else code


def ssn(r: random.Random) -> str:
    area = r.choice([n for n in range(1, 900) if n != 666])
    return f"{area:03d}-{r.randint(1, 99):02d}-{r.randint(1, 9999):04d}"


def never_issued_ssn(r: random.Random) -> str:
    area = r.choice(["000", "666"])
    return f"{area}-{r.randint(1, 99):02d}-{r.randint(1, 9999):04d}"


# Area codes in service (a number in an unassigned one is no phone number at all)
US_AREAS = (201, 206, 212, 213, 214, 305, 312, 404, 415, 512, 617, 646, 702, 713, 718, 805,
            917, 971)


def phone(r: random.Random) -> str:
    area, mid, end = r.choice(US_AREAS), r.choice([*range(201, 555), *range(556, 1000)]), \
        digits(r, 4)
    return r.choice([f"({area}) {mid}-{end}", f"+1 {area} {mid} {end}",
                     f"{area}-{mid}-{end}", f"+1{area}{mid}{end}",
                     f"+44 20 {r.choice('378')}{digits(r, 3)} {digits(r, 4)}",
                     f"call me on {area}.{mid}.{end}"])


def email(r: random.Random) -> str:
    first = r.choice(["jane", "omar", "li", "maria", "kofi", "anna"])
    last = r.choice(["doe", "haddad", "wei", "garcia", "mensah", "schmidt"])
    host = r.choice(["example.com", "mail.example.org", "corp.example.io", "uni.example.de"])
    return f"{first}.{last}{r.randint(1, 99)}@{host}"


def ip(r: random.Random) -> str:
    if r.random() < 0.2:
        return "2001:db8:" + ":".join(f"{r.randint(0, 65535):x}" for _ in range(6))
    return ".".join(str(x) for x in (r.randint(1, 223), r.randint(0, 255), r.randint(0, 255),
                                     r.randint(1, 254)))


def mac(r: random.Random) -> str:
    sep = r.choice([":", "-"])
    return sep.join(f"{r.randint(0, 255):02X}" for _ in range(6))


POSITIVES: dict[str, Make] = {
    "CREDIT_CARD": card, "IBAN_CODE": iban, "US_SSN": ssn, "PHONE_NUMBER": phone,
    "EMAIL_ADDRESS": email, "IP_ADDRESS": ip, "MAC_ADDRESS": mac,
}

NEAR_MISSES: dict[str, Make] = {
    "order number failing Luhn": lambda r: f"order #{card(r, valid=False)}",
    "16-digit run failing Luhn": lambda r: card(r, valid=False).replace(" ", "")
    .replace("-", ""),
    "IBAN with a wrong check": lambda r: iban(r, valid=False),
    "SSN never issued (000, 666)": never_issued_ssn,
    "date": lambda r: r.choice([f"2026-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}",
                                f"{r.randint(1, 28)}/{r.randint(1, 12)}/2026",
                                f"Nov {r.randint(1, 28)}, 2026"]),
    "time": lambda r: f"at {r.randint(0, 23):02d}:{r.randint(0, 59):02d}",
    "version string": lambda r: r.choice([
        f"v{r.randint(0, 9)}.{r.randint(0, 30)}.{r.randint(0, 99)}",
        f"release {r.randint(1, 9)}.{r.randint(0, 30)}.{r.randint(0, 99)}",
        f"build v{r.randint(1, 9)}.{r.randint(0, 9)}.{r.randint(0, 9)}.{r.randint(0, 99)}"]),
    "ZIP code": lambda r: f"ZIP {digits(r, 5)}",
    "invoice number": lambda r: f"INV-2026-{digits(r, 6)}",
    "parcel tracking number": lambda r: f"1Z{digits(r, 3)}AA{digits(r, 10)}",
    "ISBN": lambda r: f"ISBN 978-{r.randint(0, 9)}-{digits(r, 2)}-{digits(r, 6)}-"
    f"{r.randint(0, 9)}",
    "commit hash": lambda r: "".join(r.choice("0123456789abcdef") for _ in range(12)),
    "amount": lambda r: f"${r.randint(1, 999)},{digits(r, 3)},{digits(r, 3)}.{digits(r, 2)}",
}


def evaluate(scanner: PiiScanner, per_kind: int, seed: int) -> None:
    r = random.Random(seed)
    found_as: Counter[tuple[str, str]] = Counter()  # (expected, found) over positives
    false_hits: Counter[tuple[str, str]] = Counter()  # (near miss, found)
    flagged: Counter[str] = Counter()
    took: list[float] = []
    entities = list(DEFAULT_PII_ENTITIES)

    def scan(text: str) -> set[str]:
        started = time.perf_counter()
        hits = {f.entity for f in scanner.find(text, entities, THRESHOLD)}
        took.append(time.perf_counter() - started)
        return hits

    for kind, make in POSITIVES.items():
        for _ in range(per_kind):
            hits = scan(r.choice(TEMPLATES).format(make(r)))
            found_as[(kind, kind if kind in hits else "-")] += 1
            for other in hits - {kind}:
                found_as[(kind, other)] += 1
    for kind, make in NEAR_MISSES.items():
        for _ in range(per_kind):
            hits = scan(r.choice(TEMPLATES).format(make(r)))
            flagged[kind] += bool(hits)
            for hit in hits:
                false_hits[(kind, hit)] += 1

    print(f"{per_kind} sentences per kind, seed {seed}, default entity types, threshold "
          f"{THRESHOLD}; {len(took)} scans, median {statistics.median(took) * 1e3:.2f} ms\n")
    print("| entity type | recall | precision | found where nothing of it was |")
    print("|---|---|---|---|")
    for kind in POSITIVES:
        caught = found_as[(kind, kind)]
        wrong = Counter({k: n for (k, f), n in found_as.items() if f == kind and k != kind})
        wrong.update({k: n for (k, f), n in false_hits.items() if f == kind})
        fp = sum(wrong.values())
        where = ", ".join(f"{k} {n}" for k, n in wrong.most_common()) or "-"
        print(f"| {kind} | {caught / per_kind:.3f} | "
              f"{caught / (caught + fp) if caught + fp else 1.0:.3f} | {where} |")
    print("\n| near miss | flagged | as |")
    print("|---|---|---|")
    for kind in NEAR_MISSES:
        hits = ", ".join(f"{f} {n}" for (k, f), n in false_hits.most_common() if k == kind)
        print(f"| {kind} | {flagged[kind] / per_kind:.3f} | {hits or '-'} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--per-kind", type=int, default=200, help="sentences per kind")
    p.add_argument("--seed", type=int, default=7)
    a = p.parse_args()
    evaluate(PiiScanner(), a.per_kind, a.seed)


if __name__ == "__main__":
    main()
