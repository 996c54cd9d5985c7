"""Presidio's pattern recognizers as the guards use them: offline, checksums honoured."""

from __future__ import annotations

import pytest

from llm_operator.api.guardrails import DEFAULT_PII_ENTITIES, PII_ENTITIES
from llm_operator.guardrails.pii import PiiScanner, shared_scanner
from llm_operator.guardrails.possible import possible


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
