"""Autoscaling end to end: the rendered ScaledObject driven through KEDA's scaling rules."""

from __future__ import annotations

from typing import Any

from llm_operator.api.validation import parse_llmmodel
from llm_operator.render import render

from keda_model import Load, simulate
from samples import sample_doc

STEP = 15  # the rendered pollingInterval


def rendered(stem: str) -> dict[str, dict[str, Any]]:
    doc = sample_doc(stem)
    return {o["kind"]: o for o in render(parse_llmmodel(doc))}


def minutes(n: float, load: Load) -> list[Load]:
    return [load] * int(n * 60 / STEP)


def test_scale_to_zero_model_over_burst_steady_idle_and_wake() -> None:
    """gemma4-26b-amd: min 0, max 3, threshold 3, cooldown 300 s."""
    objects = rendered("gemma4-26b-amd")
    target = objects["HTTPScaledObject"]["spec"]["scalingMetric"]["concurrency"]["targetValue"]
    curve = (minutes(2, Load(0)) + minutes(0.25, Load(0, pending=1))  # a request arrives
             + minutes(3, Load(20, pending=20))                       # burst
             + minutes(10, Load(4, pending=4))                        # steady
             + minutes(10, Load(0)))                                  # idle
    replicas = simulate(objects["ScaledObject"], target, curve)
    at = {m: replicas[int(m * 60 / STEP) - 1] for m in (2, 2.25, 5, 7, 12, 15, 20, 25)}
    assert at[2] == 0                # idle at zero: no pods, nothing wakes it
    assert at[2.25] == 1             # the pending request at the interceptor wakes it
    assert at[5] == 3                # burst: ceil(20 / 3) = 7, capped at maxReplicas 3
    assert at[7] == 3                # steady: 2 wanted, held by the 5-minute stabilization
    assert at[12] == 2 and at[15] == 2
    assert at[20] == 2               # idle: cooldown running, stabilization still holds 2
    assert at[25] == 0               # cooldown over: back to zero
    assert max(replicas) == 3


def test_without_the_http_addon_a_zero_scaled_model_never_wakes() -> None:
    objects = rendered("gemma4-26b-amd")
    scaled = objects["ScaledObject"]
    scaled["spec"]["triggers"] = [t for t in scaled["spec"]["triggers"]
                                  if t["type"] != "external-push"]
    replicas = simulate(scaled, None, minutes(5, Load(10, pending=10)))
    assert set(replicas) == {0}  # the reason the operator refuses min 0 without the add-on


def test_min_one_model_never_goes_below_one() -> None:
    """gemma4-31b-nvidia: min 1, max 2, threshold 3."""
    objects = rendered("gemma4-31b-nvidia")
    assert "HTTPScaledObject" not in objects
    curve = minutes(3, Load(9)) + minutes(15, Load(0))
    replicas = simulate(objects["ScaledObject"], None, curve)
    assert max(replicas) == 2 and replicas[-1] == 1 and min(replicas) == 1


def test_activation_threshold_wakes_on_the_first_waiting_request() -> None:
    objects = rendered("gemma4-31b-nvidia")
    prom = objects["ScaledObject"]["spec"]["triggers"][0]["metadata"]
    assert float(prom["activationThreshold"]) < 1  # KEDA activates on value > threshold
