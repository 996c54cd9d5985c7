"""Which PII entity types a text could hold, and where, by what each needs (pure, cheap).

Presidio runs every asked recognizer over the whole text; its phone recognizer alone (the
phonenumbers library, over several regions) costs two thirds of a short prompt's check
(bench/guardrails). Most prompts are prose: a card needs a dozen digits, an e-mail
address an ``@``. These are necessary conditions only, never a finding: a type that could
be there is still left to its recognizer. ``regions`` goes one step further: the parts of
a long text that could hold any of the types, with the words around them, so that the
rest of a 2 KB prompt is never tokenized or scanned.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

DIGITS = "0123456789"
# Each begins with a separator, which the regular expression engine skips to: a search over
# a 4 KB prompt costs microseconds, where one that begins with a hex digit tries at every
# letter a to f of the prose.
IP = re.compile(r"\.\d{1,3}\.\d{1,3}\.|:[0-9A-Fa-f]*:")  # inside any IPv4, IPv6 address
MAC = re.compile(r"[:-][0-9A-Fa-f]{2}[:-]|\.[0-9A-Fa-f]{4}\.")  # inside 01:23:45.., 0123.4567..
LONG_WORD = 26  # a wallet address: 26 characters or more without a space
LONG = re.compile(rf"\S{{{LONG_WORD},}}")


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
    "CRYPTO": (0, lambda t: max(map(len, t.split()), default=0) >= LONG_WORD),
}


# Every match of these types holds one of ANCHOR's matches: a digit, an "@", a colon or a
# MAC address's separator, or (a wallet address) a word of 26 characters or more. URL,
# DATE_TIME and the license numbers can be written in letters alone: with them the whole
# text is scanned.
ANCHORED = frozenset({"CREDIT_CARD", "PHONE_NUMBER", "US_SSN", "US_ITIN", "US_BANK_NUMBER",
                      "US_PASSPORT", "UK_NHS", "IBAN_CODE", "EMAIL_ADDRESS", "IP_ADDRESS",
                      "MAC_ADDRESS", "CRYPTO"})
ANCHOR = re.compile(r"[\d@:]+|" + MAC.pattern)
# Characters kept on each side of an anchor: the longest match that reaches beyond its
# anchor (an e-mail address's local part and domain), and the five words of context that
# Presidio would read around a match with a lemmatizer installed.
MARGIN = 100
# Anchors no further apart than two margins, as one match: their regions merge, and the
# regular expression engine does that merging (64 KB of card numbers: 1.7 ms, where a
# Python loop over each anchor took 12 ms of the event loop). A long word first: at a
# word's start it covers the whole word, as its own match would.
_NEAR = rf".{{0,{2 * MARGIN}}}?"
CLUSTER = re.compile(rf"(?s:(?:{ANCHOR.pattern})(?:{_NEAR}(?:{ANCHOR.pattern}))*)")
CLUSTER_WITH_WORDS = re.compile(
    rf"(?s:(?:{LONG.pattern}|{ANCHOR.pattern})(?:{_NEAR}(?:{LONG.pattern}|{ANCHOR.pattern}))*)")
WHOLE = 0.75  # regions covering more of the text than this: scan it whole, in one pass
# The most text Presidio analyzes in one go. Its cost grows faster than the text (20 KB of
# card numbers: 2.3 s, 80 KB: 18 s, measured here), so a longer part is analyzed in pieces
# this long that overlap by MARGIN: linear in the text, and each piece a bounded job that
# other requests' pieces take turns with (guardrails/runner.py).
PIECE = 1024


def regions(entities: Sequence[str], text: str) -> list[tuple[int, int]]:
    """(start, end) of the parts of ``text`` to scan for ``entities``, in order.

    Each part runs from whitespace to whitespace, so no word is cut and a pattern's word
    boundaries fall where they would in the whole text.
    """
    if not set(entities) <= ANCHORED:
        return [(0, len(text))]
    clusters = CLUSTER_WITH_WORDS if "CRYPTO" in entities else CLUSTER
    return whole_words(text, with_margins(text, (m.span() for m in clusters.finditer(text))))


def with_margins(text: str, anchors: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The anchors, in order, with MARGIN characters each side, overlapping ones merged."""
    spans: list[tuple[int, int]] = []
    for at, until in anchors:
        start, end = max(0, at - MARGIN), min(len(text), until + MARGIN)
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        else:
            spans.append((start, end))
    return spans


def whole_words(text: str, spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The spans widened to whitespace and merged; the whole text where they cover most."""
    out: list[tuple[int, int]] = []
    for near_start, near_end in spans:
        start, end = near_start, near_end
        while start > 0 and not text[start - 1].isspace():
            start -= 1
        while end < len(text) and not text[end].isspace():
            end += 1
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    if sum(e - s for s, e in out) > WHOLE * len(text):
        return [(0, len(text))]
    return out


def possible(entities: Sequence[str], text: str) -> list[str]:
    """The types of ``entities`` that ``text`` could hold (the others cannot be there)."""
    digits = _digits(text) if any(NEEDS.get(e, (0, None))[0] for e in entities) else 0
    kept = []
    for entity in entities:
        least, test = NEEDS.get(entity, (0, None))
        if digits >= least and (test is None or test(text)):
            kept.append(entity)
    return kept


def _to_space(text: str, at: int, step: int) -> int:
    """``at`` moved by ``step`` until it sits at whitespace or an end of the text.

    By MARGIN characters at most: text without whitespace is cut where it is (an entity
    across the cut lies whole in the neighbouring piece's overlap).
    """
    for _ in range(MARGIN):
        if not 0 < at < len(text) or text[at - 1 if step < 0 else at].isspace():
            break
        at += step
    return at


def pieces(entities: Sequence[str], text: str) -> list[tuple[int, int, bool, bool]]:
    """``regions`` cut into pieces of about ``PIECE`` characters, each to scan alone.

    (start, end, cut_before, cut_after): consecutive pieces of a region overlap by MARGIN
    or more, whole words, so an entity shorter than MARGIN lies whole in one of them; a
    finding that touches a cut edge may be a part of one and is left to the neighbour.
    """
    out: list[tuple[int, int, bool, bool]] = []
    for start, end in regions(entities, text):
        if end - start <= PIECE + 4 * MARGIN:  # as long as a piece may be: one
            out.append((start, end, False, False))
            continue
        cuts = [start]
        while end - cuts[-1] > PIECE:
            cut = _to_space(text, cuts[-1] + PIECE, -1)
            cuts.append(cut if cut > cuts[-1] + MARGIN else cuts[-1] + PIECE)
        cuts.append(end)
        for index in range(len(cuts) - 1):
            first, last = index == 0, index == len(cuts) - 2
            at = start if first else _to_space(text, cuts[index] - MARGIN, -1)
            until = end if last else _to_space(text, cuts[index + 1] + MARGIN, 1)
            out.append((at, until, not first, not last))
    return out
