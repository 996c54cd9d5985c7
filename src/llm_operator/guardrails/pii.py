"""Personal data found by Microsoft Presidio's pattern recognizers, offline, and masked.

Presidio's analyzer wants a spaCy pipeline; a trained one (NER: names, places) is a
download, so this one is spaCy's blank English pipeline, which only splits tokens, and
the NER recognizer is left out: the pattern recognizers (with their checksums) run alone.
The e-mail recognizer's domain check would fetch the public suffix list on first use: it
reads tldextract's bundled snapshot instead. Building it imports spaCy and compiles every
recognizer (about a second): do it once, off the event loop (guardrails/guards.py).
"""

from __future__ import annotations

import bisect
import functools
import logging
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from llm_operator.guardrails.possible import pieces, possible

LANGUAGE = "en"
# Phone numbers must be grouped as their country writes them (libphonenumber's
# STRICT_GROUPING), not merely valid in one of the recognizer's eight regions (VALID,
# Presidio's default): on bench/guardrails/corpus.py's sentences the phone recognizer's
# precision went from 0.41 to 0.89 at the same recall (1.0); before, every invoice number
# like INV-2026-000123 and a quarter of the IP addresses were phone numbers.
PHONE_LENIENCY = 2
# Where a phone number could be: a run of digits and the separators numbers are written
# with, holding five digits or more. The phonenumbers library reads only these (and the
# character on each side, which tells a number from part of a word): over a whole text,
# for eight regions, it took 2.9 of a short prompt's 4.7 ms.
PHONE_RUN = re.compile(r"[+(]?\d[\d\s().\-/]*\d")
PHONE_DIGITS = 5
# A run that is one card number (16 to 19 digits passing Luhn's check: E.164 numbers have
# 15 digits at most) is no phone number: the library's eight regions are not asked about
# it. They were three quarters of a 2 KB prompt's check when it held a card number.
CARD_DIGITS = range(16, 20)


def luhn_valid(digits: str) -> bool:
    """Luhn's checksum (ISO/IEC 7812) over a string of digits."""
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char) * (2 if index % 2 else 1)
        total += value - 9 if value > 9 else value
    return total % 10 == 0


def card_number(run: str) -> bool:
    """Whether a run of digits and separators is one card number, whole."""
    digits = "".join(c for c in run if c.isdigit())
    return len(digits) in CARD_DIGITS and luhn_valid(digits)


# A run of more digits than a phone number holds (E.164: 15, with an extension a few more)
# is many numbers written side by side: a column of card numbers, one per line, is one run.
# The phonenumbers library read such a run whole, in time growing with its length (86 % of
# the check of 1 KB of card numbers); it reads windows of it instead, card numbers left
# out: each window holds at most RUN_DIGITS digits, and the next starts PHONE_MAX digits
# later, so a number of up to PHONE_MAX digits lies whole in one of them.
PHONE_MAX = 17
RUN_DIGITS = 2 * PHONE_MAX
# a card number's place, at every start (a lookahead: candidates may overlap, and the
# one that passes Luhn's check is the card)
CARD_IN_RUN = re.compile(r"(?<!\d)(?=((?:\d{4}[ -]?){3}\d{4}(?!\d)|\d{16,19}(?!\d)))")
DIGIT_GROUP = re.compile(r"\d+")


def _windows(groups: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Windows over consecutive digit groups.

    Each holds at most RUN_DIGITS digits; the next starts PHONE_MAX digits on (one group on
    at least).
    """
    out: list[tuple[int, int]] = []
    first = 0
    while first < len(groups):
        last, digits = first, 0
        while last < len(groups) and (last == first or digits + groups[last][1]
                                      - groups[last][0] <= RUN_DIGITS):
            digits += groups[last][1] - groups[last][0]
            last += 1
        out.append((groups[first][0], groups[last - 1][1]))
        if last >= len(groups):
            break
        skipped, nxt = 0, first
        while nxt < last - 1 and skipped < PHONE_MAX:
            skipped += groups[nxt][1] - groups[nxt][0]
            nxt += 1
        first = max(first + 1, nxt)
    return out


def phone_parts(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Where in ``text[start:end]`` (a run) a phone number could be.

    The run itself; or, in a run longer than a phone number, windows between the card
    numbers it holds (``_windows``), each led by the ``+`` or ``(`` before it. A group of
    more than PHONE_MAX digits is no phone number and holds none: windows stop at it.
    """
    if sum(c.isdigit() for c in text[start:end]) <= RUN_DIGITS:
        return [(start, end)]
    gaps, at = [], start
    for card in CARD_IN_RUN.finditer(text, start, end):
        if card.start(1) >= at and card.end(1) <= end and card_number(card.group(1)):
            gaps.append((at, card.start(1)))
            at = card.end(1)
    gaps.append((at, end))
    parts: list[tuple[int, int]] = []
    for gap_start, gap_end in gaps:
        segment: list[tuple[int, int]] = []
        for group in [*DIGIT_GROUP.finditer(text, gap_start, gap_end), None]:
            if group is None or group.end() - group.start() > PHONE_MAX:
                parts += _windows(segment)
                segment = []
            else:
                segment.append(group.span())
    led = []
    for begin, until in parts:
        lead = begin
        while lead > start and text[lead - 1] in "+(":
            lead -= 1
        led.append((lead, until))
    return [(a, b) for a, b in led if sum(c.isdigit() for c in text[a:b]) >= PHONE_DIGITS]


class Finding(NamedTuple):
    """One entity found in a text: its type, where, and Presidio's score."""

    entity: str
    start: int
    end: int
    score: float


def merged(findings: Sequence[Finding]) -> list[Finding]:
    """Findings that overlap as one span, typed by the best scored of them (then the longest).

    An e-mail address holds a URL (its domain): the address is masked whole.
    """
    out: list[Finding] = []
    for found in sorted(findings, key=lambda f: (f.start, -f.end)):
        if out and found.start < out[-1].end:
            last = out[-1]
            best = max((last, found), key=lambda f: (f.score, f.end - f.start))
            out[-1] = Finding(best.entity, last.start, max(last.end, found.end),
                              max(last.score, found.score))
        else:
            out.append(found)
    return out


def masked_text(text: str, findings: Sequence[Finding]) -> str:
    """``text`` with each finding replaced by ``<ENTITY_TYPE>`` (overlaps merged): linear."""
    parts, at = [], 0
    for found in merged(findings):
        parts += [text[at:found.start], f"<{found.entity}>"]
        at = found.end
    parts.append(text[at:])
    return "".join(parts)


def kept_in_piece(found: Sequence[Finding], start: int, end: int, cut_before: bool,
                  cut_after: bool) -> list[Finding]:
    """Findings of the piece ``text[start:end]``, placed in the whole text.

    One touching a cut edge may be part of an entity, which the neighbouring piece holds
    whole: it is left out.
    """
    return [Finding(f.entity, f.start + start, f.end + start, f.score) for f in found
            if not (cut_before and f.start == 0) and not (cut_after and f.end == end - start)]


def match_token(start: int, starts: Sequence[int], length: Callable[[int], int],
                word: str = "") -> int:
    """The index of the first token that ends after ``start``: the token it falls in.

    Tokens start at ``starts``, in order, and do not overlap; ``length`` of one by index.
    A ``start`` between tokens gives the next one; ValueError if none is left, as
    Presidio's own lookup says.
    """
    at = bisect.bisect_right(starts, start) - 1
    if at >= 0 and start < starts[at] + length(at):
        return at
    if at + 1 < len(starts):
        return at + 1
    raise ValueError(f"Did not find word {word!r} in the list of tokens although it is "
                     "expected to be found")


def _offline_suffix_list() -> None:
    """Tldextract's module-wide extractor, reading its bundled snapshot and nothing else."""
    from tldextract import tldextract  # noqa: PLC0415

    if tldextract.TLD_EXTRACTOR.suffix_list_urls:
        tldextract.TLD_EXTRACTOR = tldextract.TLDExtract(
            suffix_list_urls=(), cache_dir=None, fallback_to_snapshot=True)


class PiiScanner:
    """Presidio's analyzer (pattern recognizers only), and masking in linear time; thread-safe.

    (Presidio's anonymizer took 8 s to mask 4,000 card numbers: quadratic in the findings.)
    """

    def __init__(self) -> None:
        import spacy  # noqa: PLC0415  (seconds to import: only where a guard needs it)
        from presidio_analyzer import (  # noqa: PLC0415
            AnalyzerEngine,
            RecognizerRegistry,
            RecognizerResult,
        )
        from presidio_analyzer.context_aware_enhancers import (  # noqa: PLC0415
            LemmaContextAwareEnhancer,
        )
        from presidio_analyzer.nlp_engine import NlpArtifacts, SpacyNlpEngine  # noqa: PLC0415
        from presidio_analyzer.predefined_recognizers import PhoneRecognizer  # noqa: PLC0415

        _offline_suffix_list()

        class BlankEnglish(SpacyNlpEngine):
            """spaCy's blank English pipeline: tokens, lemmas absent, no entities."""

            def load(self) -> None:
                self.nlp = {LANGUAGE: spacy.blank(LANGUAGE)}  # type: ignore[assignment]

        nlp = BlankEnglish(models=[{"lang_code": LANGUAGE, "model_name": "blank"}])
        nlp.load()
        registry = RecognizerRegistry(supported_languages=[LANGUAGE])
        presidio = logging.getLogger("presidio-analyzer")
        level = presidio.level
        presidio.setLevel(logging.ERROR)  # a warning for each recognizer of another language
        try:
            registry.load_predefined_recognizers(languages=[LANGUAGE], nlp_engine=nlp)
        finally:
            presidio.setLevel(level)
        registry.remove_recognizer("SpacyRecognizer")  # NER: needs a trained pipeline
        registry.remove_recognizer("PhoneRecognizer")

        class PhoneRuns(PhoneRecognizer):
            """Presidio's phone recognizer, over the runs of a text that could be numbers."""

            def analyze(self, text: str, entities: list[str],
                        nlp_artifacts: NlpArtifacts | None = None) -> list[RecognizerResult]:
                found, seen = [], set()
                for run in PHONE_RUN.finditer(text):
                    if sum(c.isdigit() for c in run.group()) < PHONE_DIGITS \
                            or card_number(run.group()):
                        continue
                    for at, until in phone_parts(text, run.start(), run.end()):
                        start, end = max(0, at - 1), min(len(text), until + 1)
                        for result in super().analyze(  # its own default is None too
                                text[start:end], entities,
                                nlp_artifacts):  # type: ignore[arg-type]
                            result.start += start
                            result.end += start
                            if (result.start, result.end) not in seen:  # parts overlap
                                seen.add((result.start, result.end))
                                found.append(result)
                return found

        class NearbyWords(LemmaContextAwareEnhancer):
            """Presidio's context enhancer, finding a match's token by bisection.

            Its own walks every token of the text for every match: a kilobyte of card
            numbers (50 matches, 200 tokens) took 4 of its 6.5 ms there, phone numbers 44.
            """

            @staticmethod
            def _find_index_of_match_token(word: str, start: int, tokens: Any,
                                           tokens_indices: list[int]) -> int:
                return match_token(start, tokens_indices,
                                   lambda at: len(tokens[at]), word)

        registry.add_recognizer(PhoneRuns(leniency=PHONE_LENIENCY))
        self._analyzer = AnalyzerEngine(nlp_engine=nlp, registry=registry,
                                        supported_languages=[LANGUAGE],
                                        context_aware_enhancer=NearbyWords())
        self._lock = threading.Lock()  # spaCy's pipeline is not documented thread-safe
        # the first analysis compiles each recognizer's patterns: not on a request
        self.find("warm up: 4111 1111 1111 1111 a@example.com +1 212 555 0123",
                  [r.supported_entities[0] for r in registry.recognizers], 0.0)

    def find(self, text: str, entities: Sequence[str], threshold: float) -> list[Finding]:
        """The entities of ``entities`` in ``text`` scored at least ``threshold``."""
        wanted = possible(entities, text)  # what it cannot hold is not looked for
        if not wanted:
            return []
        found: set[Finding] = set()
        with self._lock:
            # the parts that could hold them, in pieces of bounded cost
            for start, end, cut_before, cut_after in pieces(wanted, text):
                results = self._analyzer.analyze(text=text[start:end], language=LANGUAGE,
                                                 entities=wanted, score_threshold=threshold)
                found.update(kept_in_piece(
                    [Finding(r.entity_type, r.start, r.end, r.score) for r in results],
                    start, end, cut_before, cut_after))
        return sorted(found, key=lambda f: (f.start, f.end, f.entity))

    def mask(self, text: str, findings: Sequence[Finding]) -> str:
        """``text`` with each finding replaced by ``<ENTITY_TYPE>`` (overlaps merged)."""
        return masked_text(text, findings)


_BUILDING = threading.Lock()


def shared_scanner() -> PiiScanner:
    """The process's one scanner (every gateway in it shares it: it holds no request state)."""
    with _BUILDING:
        return _scanner()


@functools.cache
def _scanner() -> PiiScanner:
    return PiiScanner()
