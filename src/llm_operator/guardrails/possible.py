"""Which PII entity types a text could hold at all, by what each needs (pure, cheap).

Presidio runs every asked recognizer over the whole text; its phone recognizer alone (the
phonenumbers library, over several regions) costs two thirds of a short prompt's check
(bench/guardrails). Most prompts are prose: a card needs a dozen digits, an e-mail
address an ``@``. These are necessary conditions only, never a finding: a type that could
be there is still left to its recognizer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

DIGITS = "0123456789"
IP = re.compile(r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}|[0-9A-Fa-f]*:[0-9A-Fa-f]*:")  # v4, v6
MAC = re.compile(r"[0-9A-Fa-f]{2}([:-])[0-9A-Fa-f]{2}\1|[0-9A-Fa-f]{4}\.[0-9A-Fa-f]{4}\.")


def _digits(text: str) -> int:
    return sum(text.count(d) for d in DIGITS)


# entity type: (the digits it needs at least, a test on the text itself)
NEEDS: dict[str, tuple[int, Callable[[str], bool] | None]] = {
    "CREDIT_CARD": (12, None),
    "PHONE_NUMBER": (5, None),  # the shortest valid numbers of the regions it reads
    "US_SSN": (9, None),
    "US_ITIN": (9, None),
    "US_BANK_NUMBER": (8, None),
    "US_PASSPORT": (8, None),
    "UK_NHS": (10, None),
    "IBAN_CODE": (2, None),  # its check digits
    "US_DRIVER_LICENSE": (1, None),
    "MEDICAL_LICENSE": (1, None),
    "EMAIL_ADDRESS": (0, lambda t: "@" in t),
    "URL": (0, lambda t: "." in t),
    "IP_ADDRESS": (0, lambda t: IP.search(t) is not None),
    "MAC_ADDRESS": (0, lambda t: MAC.search(t) is not None),
    # a wallet address: 26 characters or more without a space
    "CRYPTO": (0, lambda t: any(len(word) >= 26 for word in t.split())),
}


def possible(entities: Sequence[str], text: str) -> list[str]:
    """The types of ``entities`` that ``text`` could hold (the others cannot be there)."""
    digits = _digits(text) if any(NEEDS.get(e, (0, None))[0] for e in entities) else 0
    kept = []
    for entity in entities:
        least, test = NEEDS.get(entity, (0, None))
        if digits >= least and (test is None or test(text)):
            kept.append(entity)
    return kept
