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
        "for a phone number; words near a match do not raise its score here).")

    @property
    def wanted(self) -> tuple[str, ...]:
        return tuple(self.entities) if self.entities else DEFAULT_PII_ENTITIES


JudgeFamily = Literal["llama-guard-3", "llama-guard-4", "granite-guardian-3", "shieldgemma"]
# Each family's categories (guardrails/judges.py holds their definitions)
JUDGE_CATEGORIES: dict[str, tuple[str, ...]] = {
    "llama-guard-3": tuple(f"S{i}" for i in range(1, 15)),
    "llama-guard-4": tuple(f"S{i}" for i in range(1, 15)),
    "granite-guardian-3": ("harm", "social_bias", "jailbreak", "violence", "profanity",
                           "sexual_content", "unethical_behavior"),
    "shieldgemma": ("dangerous_content", "harassment", "hate_speech", "sexually_explicit"),
}
DEFAULT_JUDGE_CATEGORIES: dict[str, tuple[str, ...]] = {
    **JUDGE_CATEGORIES, "granite-guardian-3": ("harm",)}


def _known_categories_cel() -> str:
    families = ", ".join(f"'{family}': [{', '.join(repr(c) for c in known)}]"
                         for family, known in JUDGE_CATEGORIES.items())
    return f"!has(self.categories) || self.categories.all(c, c in {{{families}}}[self.family])"


class JudgeGuardSpec(Wire):
    """A guard model asked, with its family's prompt, whether the text is unsafe."""

    model_config = {**Wire.model_config, "json_schema_extra": {
        "x-kubernetes-validations": [{
            "rule": _known_categories_cel(),
            "message": "categories must be the family's: Llama Guard's S1-S14, Granite "
            "Guardian's risks, ShieldGemma's policies (docs/guardrails.md)"}]}}

    model: str = Field(
        min_length=1, max_length=512, pattern=r"^\S+$",
        description="The guard model as clients call it (its modelId or namespace/name) on "
        "the same router, gateway or `llmop up`; asked on its text completions API.")
    family: JudgeFamily = Field(
        description="How it is prompted and its answer read: llama-guard-3, llama-guard-4 "
        "(safe/unsafe and hazard codes), granite-guardian-3, shieldgemma (Yes/No, one "
        "call per risk or policy).")
    categories: list[str] | None = Field(
        None, min_length=1, max_length=14, description="What to judge: Llama Guard's "
        "codes S1-S14 (default all), Granite Guardian's risks harm, social_bias, jailbreak, "
        "violence, profanity, sexual_content, unethical_behavior (default harm), "
        "ShieldGemma's policies dangerous_content, harassment, hate_speech, "
        "sexually_explicit (default all).", json_schema_extra={"x-kubernetes-list-type": "set"})
    timeout_seconds: float = Field(
        10, gt=0, le=120, description="A verdict not back within this follows onError.")

    @model_validator(mode="after")
    def _known(self) -> JudgeGuardSpec:
        known = JUDGE_CATEGORIES[self.family]
        if unknown := [c for c in self.categories or () if c not in known]:
            raise ValueError(f"categories: {', '.join(unknown)} unknown to {self.family} "
                             f"(it knows {', '.join(known)})")
        return self

    @property
    def chosen(self) -> tuple[str, ...]:
        return tuple(self.categories) if self.categories else \
            DEFAULT_JUDGE_CATEGORIES[self.family]


# OpenAI's moderation categories (omni-moderation-latest; text-moderation-latest has all
# but illicit and illicit/violent)
ModerationCategory = Literal[
    "harassment", "harassment/threatening", "hate", "hate/threatening", "illicit",
    "illicit/violent", "self-harm", "self-harm/intent", "self-harm/instructions", "sexual",
    "sexual/minors", "violence", "violence/graphic",
]
MODERATION_CATEGORIES: tuple[str, ...] = get_args(ModerationCategory)


class ModerationGuardSpec(Wire):
    """A moderation endpoint in OpenAI's shape asked about the text (OpenAI's own, say)."""

    model: str = Field(
        min_length=1, max_length=512, pattern=r"^\S+$",
        description="The moderation model as clients call it (its modelId or "
        "namespace/name) on the same router, gateway or `llmop up`: e.g. a remote LLMModel "
        "with modelId omni-moderation-latest and remoteApi https://api.openai.com/v1. Asked "
        "on its /moderations API with the route's key.")
    categories: list[ModerationCategory] | None = Field(
        None, min_length=1, max_length=len(MODERATION_CATEGORIES),
        description="Which of OpenAI's categories count (harassment, hate, illicit, "
        "self-harm, sexual, violence and their subcategories); unset: all of them.",
        json_schema_extra={"x-kubernetes-list-type": "set"})
    score_threshold: float | None = Field(
        None, gt=0, le=1, description="A category counts when its score reaches this; "
        "unset: when the endpoint flags it (its own thresholds).")
    timeout_seconds: float = Field(
        10, gt=0, le=120, description="An answer not back within this follows onError.")

    @property
    def chosen(self) -> tuple[str, ...]:
        return tuple(self.categories) if self.categories else MODERATION_CATEGORIES


ONE_DETECTOR = "a guard needs exactly one detector: pii, judge or moderation"
MASK_NEEDS_PII = ("action mask replaces what pii finds: a judge or moderation guard blocks "
                  "or logs")
_ONE_DETECTOR_CEL = ("(has(self.pii) ? 1 : 0) + (has(self.judge) ? 1 : 0) + "
                     "(has(self.moderation) ? 1 : 0) == 1")


class GuardSpec(Wire):
    """One guard: what it detects and what it does when it finds something."""

    model_config = {**Wire.model_config, "json_schema_extra": {
        "x-kubernetes-validations": [
            {"rule": _ONE_DETECTOR_CEL, "message": ONE_DETECTOR},
            {"rule": "!has(self.action) || self.action != 'mask' || has(self.pii)",
             "message": MASK_NEEDS_PII}]}}

    name: str = Field(
        min_length=1, max_length=63, pattern=GUARD_NAME,
        description="Named in metrics, in a blocked request's error and in client keys' "
        "exemptGuards (lowercase letters, digits, -).")
    action: GuardAction = Field(
        "block", description="mask: what was found is replaced by <ENTITY_TYPE> before the "
        "engine (input) or the client (output) sees it; block: the request is refused with "
        "a 400 whose code is guardrail_blocked; log: counted only.")
    pii: PiiGuardSpec | None = Field(None, description="Personal data (Presidio's "
                                     "recognizers).")
    judge: JudgeGuardSpec | None = Field(None, description="A guard model's verdict "
                                         "(Llama Guard, Granite Guardian, ShieldGemma).")
    moderation: ModerationGuardSpec | None = Field(
        None, description="A moderation endpoint's categories (OpenAI's /v1/moderations).")
    on_error: Literal["closed", "open"] = Field(
        "closed", description="A judge or moderation endpoint that fails, times out or "
        "answers no verdict: closed refuses the request (503 guardrail_unavailable), open "
        "lets it through (counted in the guardrail errors metric).")

    @model_validator(mode="after")
    def _detector(self) -> GuardSpec:
        if sum(d is not None for d in (self.pii, self.judge, self.moderation)) != 1:
            raise ValueError(ONE_DETECTOR)
        if self.action == "mask" and self.pii is None:
            raise ValueError(MASK_NEEDS_PII)
        return self

    @property
    def detector(self) -> str:
        """Which detector it has: pii, judge or moderation (spans and docs name it)."""
        return "pii" if self.pii else "judge" if self.judge else "moderation"

    @property
    def asked_model(self) -> str | None:
        """The model the guard asks (a judge's or a moderation endpoint's), if any."""
        return self.judge.model if self.judge else \
            self.moderation.model if self.moderation else None

    @property
    def categories(self) -> tuple[str, ...]:
        """What it reports in a moderation: ``pii``, or its judge's or endpoint's categories."""
        if self.judge is not None:
            return self.judge.chosen
        if self.moderation is not None:
            return self.moderation.chosen
        return ("pii",)


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
        "sees it. On a stream, PII guards check the text as it grows, holding back "
        "streamHoldBackChars; judge and moderation guards then judge the answer so far at "
        "every streamJudgeWindowChars, the window waiting for its verdict.",
        json_schema_extra={"x-kubernetes-list-type": "map",
                           "x-kubernetes-list-map-keys": ["name"]})

    max_checked_chars: int = Field(
        65536, ge=1024, le=4194304, description="The most text the guards read of one "
        "request, answer or moderation input, all its strings together. Past it a request "
        "or moderation input is refused (413) and a plain answer is not sent (502): PII "
        "analysis costs more than linear time in the text, and a judge's context is "
        "bounded. A stream's judge reads the last this many characters of the answer so far.")
    stream_hold_back_chars: int = Field(
        128, ge=16, le=4096, description="Output PII guards on a stream: the text not yet "
        "sent while it is checked; what the longest entity to catch needs (an IBAN: 34).")
    stream_judge_window_chars: int = Field(
        512, ge=32, le=65536, description="Judge and moderation output guards on a stream: "
        "the text held while its guard model is asked. Each window is judged with the "
        "answer before it (the verdict covers all that was sent) and sent once safe; the "
        "rest at the end of the answer. Smaller: text reaches the client sooner, the guard "
        "model is asked more often (a call per window).")

    @model_validator(mode="after")
    def _names(self) -> GuardrailsSpec:
        _unique_names(self.input, "input")
        _unique_names(self.output, "output")
        return self

    @property
    def every_guard(self) -> tuple[GuardSpec, ...]:
        """Every guard once by name, input's first (one of both lists checks both ways)."""
        first: dict[str, GuardSpec] = {}
        for guard in (*(self.input or ()), *(self.output or ())):
            first.setdefault(guard.name, guard)
        return tuple(first.values())

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(g.name for g in self.every_guard)
