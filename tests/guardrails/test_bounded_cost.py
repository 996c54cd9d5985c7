"""A guard's cost is bounded: pieces of bounded size, taken in turns, stopped with the client.

Presidio's analysis grows faster than its text (80 KB of card numbers: 18 s to find, 8 s
to mask with its anonymizer, measured here), and one worker thread runs every request's
PII checks. So text is read in pieces of ``PIECE`` characters, each one job; a request
with much text takes turns with the others; one whose client left stops at its next piece.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import threading
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_operator.api.guardrails import GuardSpec
from llm_operator.gateway.telemetry.metrics import GatewayMetrics
from llm_operator.guardrails.pii import (
    RUN_DIGITS,
    Finding,
    PiiScanner,
    masked_text,
    merged,
    phone_parts,
    shared_scanner,
)
from llm_operator.guardrails.possible import (
    ANCHOR,
    LONG,
    MARGIN,
    PIECE,
    pieces,
    regions,
    whole_words,
    with_margins,
)
from llm_operator.guardrails.runner import Guarding, TextTooLong
from llm_operator.guardrails.text import Spot

CARD = "4111 1111 1111 1111"
CARDS = ["CREDIT_CARD"]


def test_a_long_text_is_read_in_overlapping_pieces_of_bounded_size() -> None:
    text = f"{CARD} word " * 2000  # 50 KB, a card every 25 characters
    cut = pieces(CARDS, text)
    assert len(cut) > len(text) // (PIECE + 4 * MARGIN)
    assert cut[0][0] == 0 and cut[-1][1] == len(text)
    for (_, end, _, after), (start, _, before, _) in itertools.pairwise(cut):
        assert after and before and end - start >= MARGIN  # neighbours overlap
    assert max(end - start for start, end, _, _ in cut) <= PIECE + 4 * MARGIN
    assert all(start == 0 or text[start - 1].isspace() for start, _, _, _ in cut)


def test_a_short_text_is_one_piece() -> None:
    text = f"mail {CARD} now"
    assert pieces(CARDS, text) == [(0, len(text), False, False)]


@pytest.fixture(scope="module")
def scanner() -> PiiScanner:
    return shared_scanner()


def test_every_card_of_a_long_text_is_found_once_and_masked(scanner: PiiScanner) -> None:
    text = f"{CARD} and " * 1500  # 36 KB: every cut falls somewhere among the cards
    found = scanner.find(text, CARDS, 0.4)
    assert [text[f.start:f.end] for f in found] == [CARD] * 1500
    assert scanner.mask(text, found) == "<CREDIT_CARD> and " * 1500


@pytest.mark.parametrize(("findings", "spans"), [
    ([Finding("EMAIL_ADDRESS", 5, 18, 1.0), Finding("URL", 7, 18, 0.5)],
     [("EMAIL_ADDRESS", 5, 18)]),  # the address holds its domain: masked whole
    ([Finding("PHONE_NUMBER", 0, 12, 0.4), Finding("CREDIT_CARD", 0, 19, 1.0)],
     [("CREDIT_CARD", 0, 19)]),
    ([Finding("A", 0, 3, 1.0), Finding("B", 5, 8, 1.0)], [("A", 0, 3), ("B", 5, 8)]),
])
def test_overlapping_findings_are_masked_as_one(findings: list[Finding],
                                                spans: list[tuple[str, int, int]]) -> None:
    assert [(f.entity, f.start, f.end) for f in merged(findings)] == spans


def test_masking_is_linear_in_the_findings() -> None:
    text = f"{CARD} " * 50_000  # 1 MB: Presidio's anonymizer took minutes
    found = [Finding("CREDIT_CARD", i * 20, i * 20 + 19, 1.0) for i in range(50_000)]
    assert masked_text(text, found) == "<CREDIT_CARD> " * 50_000


class Pieces:
    """A detector that records each piece it reads; the first waits until released."""

    def __init__(self) -> None:
        self.read: list[str] = []
        self.started, self.release = threading.Event(), threading.Event()

    def find(self, text: str, entities: Sequence[str], threshold: float) -> list[Finding]:
        self.read.append(text)
        if len(self.read) == 1:
            self.started.set()
            self.release.wait(10)
        return [Finding("CREDIT_CARD", m.start(), m.end(), 1.0)
                for m in re.finditer(r"\d{4}( \d{4}){3}", text)]

    def mask(self, text: str, findings: Sequence[Finding]) -> str:
        return masked_text(text, findings)


GUARD = GuardSpec.model_validate({"name": "cards", "action": "mask",
                                  "pii": {"entities": CARDS}})


def _never(_: str) -> bool:
    return False


async def test_a_small_request_takes_its_turn_between_a_large_ones_pieces() -> None:
    detector = Pieces()
    runner = Guarding(GatewayMetrics(), scanner=lambda: detector)
    large, small = [f"{CARD} and " * 1000], ["card " + CARD]
    try:
        big = asyncio.create_task(runner.check("r", [GUARD], [Spot(large, 0)], "input",
                                               _never))
        await asyncio.to_thread(detector.started.wait, 10)  # its first piece is running
        little = asyncio.create_task(runner.check("r", [GUARD], [Spot(small, 0)], "input",
                                                  _never))
        await asyncio.sleep(0)  # the small request's piece is queued behind it
        detector.release.set()
        done, _ = await asyncio.wait({big, little}, return_when=asyncio.FIRST_COMPLETED)
        assert done == {little}
        await big
    finally:
        runner.close()
    assert detector.read.index("card " + CARD) == 1  # second, not last
    assert len(detector.read) > 3 and small == ["card <CREDIT_CARD>"]
    assert large[0] == "<CREDIT_CARD> and " * 1000


async def test_a_request_whose_client_left_reads_no_more_pieces() -> None:
    detector = Pieces()
    runner = Guarding(GatewayMetrics(), scanner=lambda: detector)
    large = [f"{CARD} and " * 1000]
    try:
        task = asyncio.create_task(runner.check("r", [GUARD], [Spot(large, 0)], "input",
                                                _never))
        await asyncio.to_thread(detector.started.wait, 10)
        task.cancel()  # the client went away (the server cancels its handler)
        detector.release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.get_running_loop().run_in_executor(runner._worker, lambda: None)
    finally:
        runner.close()
    assert len(detector.read) == 1 and len(pieces(CARDS, large[0])) > 5


async def test_more_text_than_the_guards_read_is_refused_before_any_guard_runs() -> None:
    detector = Pieces()
    detector.release.set()
    runner = Guarding(GatewayMetrics(), scanner=lambda: detector)
    try:
        with pytest.raises(TextTooLong, match="70000 characters of text, more than the "
                                              "65536 this model's guardrails read"):
            await runner.check("r", [GUARD], [Spot(["x" * 70_000], 0)], "input", _never,
                               max_chars=65536)
    finally:
        runner.close()
    assert detector.read == []


@pytest.mark.parametrize(("text", "parts"), [
    ("call 212 555 0123", ["call 212 555 0123"]),  # a phone number's run: read whole
    # card numbers side by side (a column of them is one run): left out, nothing to read
    (f"{CARD} {CARD}\n{CARD}", []),
    # a phone number between card numbers: read alone
    (f"{CARD} 415 555 0100 {CARD}", ["415 555 0100"]),
])
def test_a_run_longer_than_a_phone_number_is_read_in_parts(text: str,
                                                          parts: list[str]) -> None:
    at = 5 if text.startswith("call") else 0
    assert [text[a:b] for a, b in phone_parts(text, at, len(text))] == (
        [text[at:]] if at else parts)


def test_a_long_run_without_cards_is_read_in_overlapping_parts_of_bounded_digits() -> None:
    text = " ".join(["123"] * 40)  # 120 digits, no card number in them
    parts = phone_parts(text, 0, len(text))
    assert len(parts) > 4 and parts[0][0] == 0 and parts[-1][1] == len(text)
    assert all(sum(c.isdigit() for c in text[a:b]) <= RUN_DIGITS for a, b in parts)
    assert all(a2 < b1 for (_, b1), (a2, _) in itertools.pairwise(parts))  # they overlap


def test_a_column_of_card_numbers_is_found_card_by_card(scanner: PiiScanner) -> None:
    text = f"{CARD}\n" * 400
    found = scanner.find(text, ["CREDIT_CARD", "PHONE_NUMBER"], 0.4)
    assert [(f.entity, text[f.start:f.end]) for f in found] == [("CREDIT_CARD", CARD)] * 400


@pytest.mark.parametrize("text", ["1" * 20_000, "1-" * 8_000, "x" * 5_000 + CARD + "y" * 5_000])
def test_text_without_whitespace_is_cut_into_pieces_of_bounded_size_too(text: str) -> None:
    """Pieces walked to whitespace without bound were the whole text, each of them."""
    cut = pieces(["CREDIT_CARD", "PHONE_NUMBER"], text)
    assert max(end - start for start, end, _, _ in cut) <= PIECE + 4 * MARGIN
    for start, end, _, _ in cut:  # and a piece is never cut again when it is scanned
        assert pieces(["CREDIT_CARD", "PHONE_NUMBER"], text[start:end]) in (
            [], [(0, end - start, False, False)])


def test_a_column_of_phone_numbers_is_found_number_by_number(scanner: PiiScanner) -> None:
    """Parts that overlapped by one word lost a three-word number across their boundary."""
    text = "Branches:\n" + "\n".join(f"020 7946 01{i:02d}" for i in range(12))
    found = scanner.find(text, ["PHONE_NUMBER"], 0.4)
    assert [text[f.start:f.end] for f in found] == [f"020 7946 01{i:02d}" for i in range(12)]


def _regions_anchor_by_anchor(entities: Sequence[str], text: str) -> list[tuple[int, int]]:
    """``regions`` as a walk over each anchor finds them: the specification."""
    anchors = [m.span() for m in ANCHOR.finditer(text)]
    if "CRYPTO" in entities:
        anchors = sorted(anchors + [m.span() for m in LONG.finditer(text)])
    return whole_words(text, with_margins(text, anchors))


WORDS = st.lists(st.one_of(
    st.text("ab cd-:.@0123456789ABCDEF\n", max_size=3), st.text(" xyz", min_size=1,
                                                                 max_size=40),
    st.text("abcdef0123456789-.:", min_size=20, max_size=60)), max_size=60).map("".join)


@settings(max_examples=400, derandomize=True, database=None, deadline=None)
@given(WORDS, st.sampled_from([["CREDIT_CARD"], ["CRYPTO", "EMAIL_ADDRESS"]]))
def test_nearby_anchors_merge_in_one_match_as_they_would_one_by_one(
        text: str, entities: list[str]) -> None:
    """The regular expression that merges nearby anchors covers what a walk over every
    anchor covers, merged the same way (a walk took 12 ms of the event loop over 64 KB
    of card numbers)."""
    assert regions(entities, text) == _regions_anchor_by_anchor(entities, text)
