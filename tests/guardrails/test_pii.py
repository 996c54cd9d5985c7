"""Presidio's pattern recognizers as the guards use them: offline, checksums honoured."""

from __future__ import annotations

import pytest

from llm_operator.api.guardrails import DEFAULT_PII_ENTITIES, PII_ENTITIES
from llm_operator.guardrails.pii import PiiScanner, card_number, match_token, shared_scanner
from llm_operator.guardrails.possible import MARGIN, possible, regions


@pytest.fixture(scope="module")
def scanner() -> PiiScanner:
    return shared_scanner()


DETECTED: list[tuple[str, list[str]]] = [
    ("card 4111 1111 1111 1111", ["CREDIT_CARD"]),
    ("card 4111 1111 1111 1112", []),  # fails Luhn's check
    ("IBAN DE89 3704 0044 0532 0130 00", ["IBAN_CODE"]),
    ("IBAN DE89 3704 0044 0532 0130 01", []),  # fails the mod-97 check
    ("write to jane.doe@example.com", ["EMAIL_ADDRESS"]),
    ("ssn 536-90-4399", ["US_SSN"]),
    ("ssn 000-12-3456", []),  # no SSN starts with 000
    ("call 212-555-0123", ["PHONE_NUMBER"]),
    ("call +1 212 414 0123 or +44 20 7946 0958", ["PHONE_NUMBER", "PHONE_NUMBER"]),
    # near misses a phone recognizer took for numbers valid somewhere
    # (bench/guardrails/corpus.py): grouped as no country writes a number
    ("see INV-2026-000123", []),
    ("from 203.0.113.78", ["IP_ADDRESS"]),
    ("from 10.0.0.1", ["IP_ADDRESS"]),
    ("nic 00:1A:2B:3C:4D:5E", ["MAC_ADDRESS"]),
    ("Jane Doe lives at 12 Main Street", []),  # names, addresses: NER, not installed
    ("Once upon a time there was a fox", []),
]


@pytest.mark.parametrize(("text", "entities"), DETECTED)
def test_the_default_entities_are_found_by_pattern_and_checksum(
        scanner: PiiScanner, text: str, entities: list[str]) -> None:
    found = scanner.find(text, DEFAULT_PII_ENTITIES, 0.4)
    assert [f.entity for f in found] == entities


def test_only_the_asked_entities_above_the_threshold_are_found(scanner: PiiScanner) -> None:
    text = "mail a@example.com, call 212-555-0123, card 4111 1111 1111 1111"
    assert [f.entity for f in scanner.find(text, ["EMAIL_ADDRESS"], 0.4)] == ["EMAIL_ADDRESS"]
    assert [f.entity for f in scanner.find(text, DEFAULT_PII_ENTITIES, 0.9)] == [
        "EMAIL_ADDRESS", "CREDIT_CARD"]  # a bare phone number scores 0.4


def test_masking_replaces_each_finding_by_its_type(scanner: PiiScanner) -> None:
    text = "mail a@example.com or see http://example.com, card 4111 1111 1111 1111"
    found = scanner.find(text, PII_ENTITIES, 0.4)
    assert scanner.mask(text, found) == "mail <EMAIL_ADDRESS> or see <URL>, card <CREDIT_CARD>"


def test_every_entity_the_api_offers_has_a_recognizer(scanner: PiiScanner) -> None:
    offered = {e for r in scanner._analyzer.registry.recognizers for e in r.supported_entities}
    assert set(PII_ENTITIES) <= offered


@pytest.mark.parametrize(("text", "kept"), [
    ("Once upon a time there was a fox.", []),  # prose: nothing to look for
    ("A well-known, state-of-the-art: lighthouse. Keeper.", []),
    ("mail a@b, call 555 0100", ["EMAIL_ADDRESS", "IBAN_CODE", "PHONE_NUMBER"]),
    ("order 1234 5678 9012", ["CREDIT_CARD", "IBAN_CODE", "PHONE_NUMBER", "US_BANK_NUMBER",
                              "US_PASSPORT", "US_SSN", "US_ITIN", "UK_NHS"]),
    ("see fe80::1", ["IBAN_CODE", "IP_ADDRESS"]),
    ("nic ab:cd:ef:ab:cd:ef or abcd.ef01.2345", ["IBAN_CODE", "IP_ADDRESS", "MAC_ADDRESS",
                                                 "PHONE_NUMBER"]),
    ("pay 1BoatSLRHtKNngkdXEeobR76b53LETtpyT", ["CRYPTO", "IBAN_CODE", "PHONE_NUMBER"]),
])
def test_only_what_a_text_could_hold_is_looked_for(text: str, kept: list[str]) -> None:
    assert sorted(possible(DEFAULT_PII_ENTITIES, text)) == sorted(kept)


@pytest.mark.parametrize(("text", "entities"), [
    (text, entities) for text, entities in DETECTED if entities])
def test_nothing_a_recognizer_finds_is_filtered_out_first(text: str,
                                                          entities: list[str]) -> None:
    assert set(entities) <= set(possible(PII_ENTITIES, text))


PROSE = "The quarterly report covers revenue, costs and the outlook for the next year. " * 12
PERSONAL = "Write to jane.doe@example.com, card 4111 1111 1111 1111, or call (212) 414-0134."


@pytest.mark.parametrize(("entities", "text", "holding"), [
    # one place in a long prose: one part around it
    (DEFAULT_PII_ENTITIES, f"{PROSE}call 212-414-0134 now {PROSE}", ["212-414-0134"]),
    # two places far apart: two parts
    (DEFAULT_PII_ENTITIES, f"card 4111 1111 1111 1111 {PROSE}{PROSE}mail a@example.com",
     ["4111 1111 1111 1111", "a@example.com"]),
    (DEFAULT_PII_ENTITIES, PROSE, []),  # nothing a default type needs: nothing to scan
])
def test_a_long_text_is_scanned_where_it_could_hold_something(
        entities: list[str], text: str, holding: list[str]) -> None:
    parts = regions(entities, text)
    assert len(parts) == len(holding)
    for (start, end), held in zip(parts, holding, strict=True):
        at = text.index(held)
        # the match and MARGIN characters each side (or the text's edge), whole words
        assert start <= max(0, at - MARGIN) and end >= min(len(text), at + len(held) + MARGIN)
        assert start == 0 or text[start - 1].isspace()
        assert end == len(text) or text[end].isspace()
        assert end - start < 3 * MARGIN


@pytest.mark.parametrize(("entities", "text"), [
    (["URL"], f"{PROSE}see example.com"),  # a type that can be written in letters alone
    (DEFAULT_PII_ENTITIES, "call 212-414-0134 now"),  # parts would cover most of it
])
def test_otherwise_the_whole_text_is_scanned_once(entities: list[str], text: str) -> None:
    assert regions(entities, text) == [(0, len(text))]


@pytest.mark.parametrize("before", ["", PROSE, PROSE * 2])
def test_what_is_found_in_a_part_is_where_it_is_in_the_whole(scanner: PiiScanner,
                                                            before: str) -> None:
    text = f"{before}{PERSONAL} {PROSE}"
    found = scanner.find(text, DEFAULT_PII_ENTITIES, 0.4)
    assert [(f.entity, text[f.start:f.end]) for f in found] == [
        ("EMAIL_ADDRESS", "jane.doe@example.com"), ("CREDIT_CARD", "4111 1111 1111 1111"),
        ("PHONE_NUMBER", "(212) 414-0134")]



@pytest.mark.parametrize(("run", "card"), [
    ("4111 1111 1111 1111", True),  # Visa's test number: 16 digits, Luhn-valid
    ("4111-1111-1111-1111", True),
    ("5555555555554444", True),
    ("4111 1111 1111 1112", False),  # Luhn fails: it may be anything, phones included
    ("378282246310005", False),  # 15 digits (Amex): a phone number's length, asked
    ("+1 212 555 0123", False),
    ("4111 1111 1111 1111 0", False),  # 17 digits, Luhn fails
])
def test_a_run_that_is_one_card_number_is_not_asked_about_phones(run: str, card: bool
                                                                 ) -> None:
    assert card_number(run) == card


def test_a_card_number_beside_a_phone_number_finds_both(scanner: PiiScanner) -> None:
    text = "card 4111 1111 1111 1111, call +1 212 555 0123"
    found = [(f.entity, text[f.start:f.end]) for f in scanner.find(
        text, DEFAULT_PII_ENTITIES, 0.4)]
    assert ("CREDIT_CARD", "4111 1111 1111 1111") in found
    assert ("PHONE_NUMBER", "+1 212 555 0123") in found
    assert all(e != "PHONE_NUMBER" or "4111" not in t for e, t in found)


@pytest.mark.parametrize("text", [
    "card 4111 1111 1111 1111, call +1 212 555 0123",
    "  leading spaces, (212) 414-0134 and a@b.example.com\n\ttabs",
    "4111 1111 1111 1111 " * 12,
    "x",
])
def test_a_matchs_token_is_found_as_presidio_finds_it(text: str) -> None:
    """The scanner's context lookup by bisection agrees with Presidio's walk at every
    character offset of a real tokenization (the scanner's blank English pipeline)."""
    import spacy  # noqa: PLC0415
    from presidio_analyzer.context_aware_enhancers import (  # noqa: PLC0415
        LemmaContextAwareEnhancer,
    )
    doc = spacy.blank("en")(text)
    starts = [token.idx for token in doc]
    for start in range(len(text)):
        try:
            expected: int | str = LemmaContextAwareEnhancer._find_index_of_match_token(
                "w", start, doc, starts)
        except ValueError:
            expected = "none"
        try:
            got: int | str = match_token(start, starts, lambda at: len(doc[at]), "w")
        except ValueError:
            got = "none"
        assert got == expected, (text, start)
