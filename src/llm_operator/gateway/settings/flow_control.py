"""Flow control's settings: priority bands, fair shares, and each engine's saturation point."""

from __future__ import annotations

import functools
import math

from pydantic import Field, model_validator

from llm_operator.gateway.settings.model import SettingsModel as _Config

BAND_NAME = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"


class Band(_Config):
    """A priority band: requests wait here for a slot, the highest band's first."""

    name: str = Field(pattern=BAND_NAME, description="What client keys' band and the "
                      "x-gateway-inference-objective header name.")
    priority: int = Field(ge=-1_000_000, le=1_000_000, description="Higher is served "
                          "first, strictly. An InferenceObjective's priority selects the "
                          "band with the highest priority not above it.")
    sheddable: bool = Field(False, description="Refused at once (429) when every slot is "
                            "busy, instead of queued.")
    max_queue: int = Field(1000, ge=0, le=1_000_000, description="Requests of this band "
                           "one model may queue; more get 429 queue_full.")
    max_wait_seconds: float = Field(60.0, ge=0, le=3600, description="How long one "
                                    "request waits for a slot; then 503 queue_timeout.")
    max_share: float = Field(1.0, gt=0, le=1, description="The most of a model's slots "
                             "this band's requests hold at once (a fraction of this "
                             "gateway's slots, at least one slot): the rest stay free for "
                             "higher bands, as an engine does not give back a slot a "
                             "request holds; reserveSeconds lets it hold more where they "
                             "are not needed. 1: no cap.")
    reserve_seconds: float = Field(
        0.0, ge=0, le=3600, description="With maxShare below 1: beyond its maxShare the "
        "band may take the slots the bands above have left unused, all but the most they "
        "held at once in this many seconds (the peak is forgotten one to two such periods "
        "later), so an engine whose higher traffic is light is kept full: for engines "
        "where more requests at once cost each little (GPUs). 0: never beyond maxShare.")
    idle_seconds: float = Field(0.0, ge=0, le=3600, description="This band's requests "
                                "take a slot only once no request of a higher band has "
                                "been in flight for this long (0: whenever a slot is free). "
                                "For engines whose requests share compute (CPU): batch work "
                                "runs in the gaps of interactive traffic, and steady "
                                "interactive traffic holds it back entirely.")

    @model_validator(mode="after")
    def _can_queue(self) -> Band:
        if not self.sheddable and self.max_wait_seconds == 0:
            raise ValueError(f"band {self.name!r}: maxWaitSeconds 0 lets no request wait, "
                             "so every request that finds the slots busy fails: give it a "
                             "wait, or make the band sheddable: true")
        if not self.sheddable and self.max_queue == 0:
            raise ValueError(f"band {self.name!r}: maxQueue 0 queues nothing: give it a "
                             "length, or make the band sheddable: true")
        return self


def _default_bands() -> list[Band]:
    return [Band(name="interactive", priority=100, max_queue=1000, max_wait_seconds=60),
            Band(name="standard", priority=0, max_queue=1000, max_wait_seconds=120),
            Band(name="batch", priority=-100, max_queue=10_000, max_wait_seconds=300,
                 max_share=0.5, reserve_seconds=60)]


class SaturationSettings(_Config):
    """How many requests each replica's engine holds beyond its slots, adapted as it runs.

    The gateway sends a replica requests while it is below its saturation point (its slots
    plus an engine queue) and holds the rest in its bands' queues. While requests wait
    here it looks at the engines (their /metrics, every ``lookSeconds``): a slot idle
    while requests wait here widens that replica's engine queue by one (a freed slot then
    refills without a round trip); a full engine with requests to spare narrows it again
    after a while; a KV cache past ``kvCacheThreshold`` stops sending beyond what the
    engine runs. An engine whose metrics cannot be read keeps ``engineQueue``.
    """

    adaptive: bool = Field(True, description="Off: each replica's engine queue stays "
                           "flowControl.engineQueue.")
    max_engine_queue: float = Field(
        0.5, ge=0, le=1, description="The most requests a replica's engine may hold "
        "beyond its slots, a fraction of its slots (at least one where above 0): what an "
        "interactive request may find ahead of it in the engine's first-come-first-served "
        "queue.")
    kv_cache_threshold: float = Field(
        0.8, gt=0, le=1, description="A replica whose engine reports its KV cache this "
        "full (vLLM's kv_cache_usage_perc, 0..1) gets no request beyond those it runs.")
    look_seconds: float = Field(0.1, ge=0.01, le=60, description="How often the engines "
                                "of a model with requests waiting here are looked at.")

    def most(self, slots: int) -> int:
        """The widest engine queue of a replica with ``slots``."""
        if not self.adaptive or not self.max_engine_queue:
            return 0
        return max(1, math.floor(slots * self.max_engine_queue))


class FlowControl(_Config):
    """Requests beyond the upstreams' slots wait in the gateway (docs/flow-control.md).

    Strict priority between bands; within a band, fair shares between fairness IDs (the
    client key, or the x-gateway-inference-fairness-id header).
    """

    enabled: bool = Field(True, description="Off: every request goes straight to an "
                          "upstream, which queues it first come, first served.")
    bands: list[Band] = Field(default_factory=_default_bands, min_length=1,
                              description="Priority bands, each with its queue; default: "
                              "interactive, standard and batch.")
    default_band: str = Field("standard", pattern=BAND_NAME, description="The band of a "
                              "request that names none (or an unknown one).")
    objectives: dict[str, str] = Field(
        default_factory=dict, description="x-gateway-inference-objective names and the "
        "band each selects (where no InferenceObjective of that name is served).")
    per_replica_concurrency: int | None = Field(
        None, ge=1, le=100_000, description="Requests each upstream serves at once, for "
        "upstreams that do not say (slots); unset: those routes are not flow-controlled.")
    engine_queue: int = Field(
        0, ge=0, le=100_000, description="Requests each upstream may hold beyond its slots, "
        "waiting in its engine: a freed slot is refilled without a round trip (more "
        "throughput for short requests), but a request sent there waits first come, first "
        "served behind them (docs/flow-control.md, bench/flow). With saturation.adaptive: "
        "where each replica's engine queue starts, and what it keeps while its engine's "
        "metrics cannot be read.")
    saturation: SaturationSettings = Field(default_factory=SaturationSettings)

    @model_validator(mode="after")
    def _consistent(self) -> FlowControl:
        names = [b.name for b in self.bands]
        for index, band in enumerate(self.bands):
            if names.index(band.name) != index:
                raise ValueError(f"bands[{index}]: name {band.name!r} is used twice")
        priorities = [b.priority for b in self.bands]
        if len(set(priorities)) != len(priorities):
            raise ValueError("bands: two share a priority; give each band its own")
        if self.default_band not in names:
            raise ValueError(f"defaultBand: {self.default_band!r} is not a band (bands: "
                             f"{', '.join(names)})")
        if all(b.sheddable for b in self.bands) and not self.engine_queue:
            raise ValueError("bands: every band is sheddable and engineQueue is 0: no "
                             "request ever waits here, so the engine queue never adapts "
                             "and every request beyond the slots is refused; let one band "
                             "queue, or set engineQueue")
        for objective, target in self.objectives.items():
            if target not in names:
                raise ValueError(f"objectives.{objective}: {target!r} is not a band (bands: "
                                 f"{', '.join(names)})")
        return self

    @functools.cached_property
    def _by_name(self) -> dict[str, Band]:
        return {b.name: b for b in self.bands}

    def band(self, name: str) -> Band | None:
        """The band called ``name`` (a lookup: every request's classification asks)."""
        return self._by_name.get(name)
