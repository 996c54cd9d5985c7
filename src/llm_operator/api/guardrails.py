"""Guardrails declared with a model: input and output guards, each a detector and an action."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field, model_validator

from llm_operator.api.wire import Wire

# Presidio's pattern recognizers (checksums where the entity has one: Luhn for cards,
# mod-97 for IBANs). Names, places and organisations need an NER model, which is not
# installed (nothing is downloaded at run time): docs/guardrails.md says what that misses.
PiiEntity = Literal[
    "CREDIT_CARD", "CRYPTO", "EMAIL_ADDRESS", "IBAN_CODE", "IP_ADDRESS", "MAC_ADDRESS",
    "PHONE_NUMBER", "US_SSN", "US_ITIN", "US_PASSPORT", "US_BANK_NUMBER", "US_DRIVER_LICENSE",
    "UK_NHS", "MEDICAL_LICENSE", "URL", "DATE_TIME",
]
PII_ENTITIES: tuple[str, ...] = get_args(PiiEntity)
# unset ``entities``: what identifies a person or an account, not the noisy ones (URL,
# DATE_TIME, and US_DRIVER_LICENSE, whose pattern matches many short codes)
DEFAULT_PII_ENTITIES: tuple[str, ...] = (
    "CREDIT_CARD", "CRYPTO", "EMAIL_ADDRESS", "IBAN_CODE", "IP_ADDRESS", "MAC_ADDRESS",
    "PHONE_NUMBER", "US_SSN", "US_ITIN", "US_PASSPORT", "US_BANK_NUMBER", "UK_NHS",
)
GuardAction = Literal["mask", "block", "log"]
GUARD_NAME = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"


class PiiGuardSpec(Wire):
    """Personal data found by Microsoft Presidio's pattern recognizers."""

    entities: list[PiiEntity] | None = Field(
        None, min_length=1, max_length=len(PII_ENTITIES),
        description="Entity types to find; unset: every type but URL, DATE_TIME and "
        "US_DRIVER_LICENSE.", json_schema_extra={"x-kubernetes-list-type": "set"})
    score_threshold: float = Field(
        0.4, ge=0, le=1, description="Findings scored below this are ignored (Presidio's "
        "scores: 1.0 for a checksum-valid card or IBAN, 0.5 for an SSN-shaped number, 0.4 "
        "for a phone number without a word like 'phone' near it).")

    @property
    def wanted(self) -> tuple[str, ...]:
        return tuple(self.entities) if self.entities else DEFAULT_PII_ENTITIES


class GuardSpec(Wire):
    """One guard: what it detects and what it does when it finds something."""

    name: str = Field(
        min_length=1, max_length=63, pattern=GUARD_NAME,
        description="Named in metrics, in a blocked request's error and in client keys' "
        "exemptGuards (lowercase letters, digits, -).")
    action: GuardAction = Field(
        "block", description="mask: what was found is replaced by <ENTITY_TYPE> before the "
        "engine (input) or the client (output) sees it; block: the request is refused with "
        "a 400 whose code is guardrail_blocked; log: counted only.")
    pii: PiiGuardSpec = Field(description="Personal data (Presidio's recognizers).")


def _unique_names(guards: list[GuardSpec] | None, where: str) -> None:
    names = [g.name for g in guards or ()]
    if twice := sorted({n for n in names if names.count(n) > 1}):
        raise ValueError(f"{where}: guard names must be unique ({', '.join(twice)} twice)")


class GuardrailsSpec(Wire):
    """Guards on what is asked of the model and on what it answers (docs/guardrails.md)."""

    input: list[GuardSpec] | None = Field(
        None, max_length=16, description="Checked on the request's text (messages, prompt, "
        "input) before it is sent to the model, in order: the first that blocks ends it.",
        json_schema_extra={"x-kubernetes-list-type": "map",
                           "x-kubernetes-list-map-keys": ["name"]})
    output: list[GuardSpec] | None = Field(
        None, max_length=16, description="Checked on the model's answer before the client "
        "sees it (a stream: whole, then sent at once; docs/guardrails.md).",
        json_schema_extra={"x-kubernetes-list-type": "map",
                           "x-kubernetes-list-map-keys": ["name"]})

    @model_validator(mode="after")
    def _names(self) -> GuardrailsSpec:
        _unique_names(self.input, "input")
        _unique_names(self.output, "output")
        return self

    @property
    def names(self) -> tuple[str, ...]:
        """Every guard's name, once."""
        return tuple(dict.fromkeys(g.name for g in (*(self.input or ()),
                                                    *(self.output or ()))))
