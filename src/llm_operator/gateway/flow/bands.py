"""Which flow-control band and fairness ID a request gets: its key, then its headers.

The Gateway API Inference Extension's headers name them: ``x-gateway-inference-objective``
(a band, an objective mapped in settings, or an InferenceObjective whose priority selects
a band) and ``x-gateway-inference-fairness-id``. With client keys the key decides: a
header may lower the key's band and narrow its ID (fairness between the key's own users),
never raise the band or take another key's share.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from llm_operator.access.keyring import ClientKey
from llm_operator.gateway.settings.flow_control import Band, FlowControl

OBJECTIVE_HEADER = "x-gateway-inference-objective"
FAIRNESS_HEADER = "x-gateway-inference-fairness-id"
MAX_FAIRNESS_ID_BYTES = 256


class BadFairnessId(ValueError):
    """The fairness header cannot be used; the message says what to fix (a 400)."""


@dataclass(slots=True)  # one per request: not frozen, whose __init__ costs 5x
class Classified:
    """A request's band, its fairness ID (group, and member within it) and what was ignored.

    ``group`` is what fairness is shared between (a client key, or the header's ID
    without keys); ``member`` narrows it within the group. ``ignored`` says why a header's
    band was not taken (``unknown``, ``above_key``), None when it was or none was sent.
    """

    band: Band
    group: str
    member: str = ""
    ignored: str | None = None


def band_for_priority(flow: FlowControl, priority: int) -> Band:
    """The band with the highest priority not above ``priority``; else the lowest band."""
    below = [b for b in flow.bands if b.priority <= priority]
    if below:
        return max(below, key=lambda b: b.priority)
    return min(flow.bands, key=lambda b: b.priority)


def _named_band(flow: FlowControl, name: str, objectives: Mapping[str, int]) -> Band | None:
    """The band a header names: a band, a settings objective, an InferenceObjective."""
    band = flow.band(name)
    if band is not None:
        return band
    mapped = flow.objectives.get(name)
    if mapped is not None:
        return flow.band(mapped)
    priority = objectives.get(name)
    return band_for_priority(flow, priority) if priority is not None else None


def fairness_id(value: str) -> str:
    """The header's ID; BadFairnessId when it is too long or has control characters."""
    if len(value.encode()) > MAX_FAIRNESS_ID_BYTES:
        raise BadFairnessId(f"{FAIRNESS_HEADER} is {len(value.encode())} bytes; at most "
                            f"{MAX_FAIRNESS_ID_BYTES} are allowed")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise BadFairnessId(f"{FAIRNESS_HEADER} contains control characters; send "
                            "printable text (a user or tenant id)")
    return value


def classify(flow: FlowControl, headers: Mapping[str, str], key: ClientKey | None,
             objectives: Mapping[str, int] | None = None) -> Classified:
    """The band and fairness ID of a request with ``headers``, sent with ``key`` (if any).

    ``objectives``: InferenceObjective names and their priorities. BadFairnessId when the
    fairness header is unusable.
    """
    given_id = headers.get(FAIRNESS_HEADER, "").strip()
    if given_id:
        fairness_id(given_id)
    named = headers.get(OBJECTIVE_HEADER, "").strip()
    default = flow.band(flow.default_band)
    assert default is not None  # FlowControl checks its default band
    ignored = None
    ceiling = None  # with a key, the highest band its requests may have
    if key is not None:
        ceiling = flow.band(key.band) if key.band else default
        if ceiling is None:  # the keys file names a band these settings lack
            ceiling, ignored = default, "unknown_key_band"
    band = ceiling or default
    if named:
        asked = _named_band(flow, named, objectives or {})
        if asked is None:
            ignored = "unknown"
        elif ceiling is not None and asked.priority > ceiling.priority:
            ignored = "above_key"
        else:
            band = asked
    if key is not None:
        return Classified(band, key.id, given_id, ignored)
    return Classified(band, given_id, "", ignored)
