"""What `llmop up` is asked to serve and where, and its gateway's flow control."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from llm_operator.gateway.settings.flow_control import FlowControl
from llm_operator.local.placement import LOOPBACK, Machine
from llm_operator.local.process import Timing
from llm_operator.local.register import Registration
from llm_operator.local.state import StateDir


@dataclass(frozen=True)
class Options:
    """What `llmop up` serves and where."""

    directory: Path
    state: StateDir
    cache_dir: Path
    gateway_port: int = 8000
    mcp_port: int = 3000
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    machine: Machine | None = None
    scan_seconds: float = 0.5
    llama_server: Path | None = None  # the binary (llama_build.locate())
    timing: Timing = field(default_factory=Timing)
    # requests that may wait for a slot per model, flow control's bound: beyond it the
    # fairness ID holding the most gets 429 (docs/flow-control.md)
    max_queue: int = 8
    gateway_host: str = LOOPBACK  # 0.0.0.0 when a cluster must reach it (--register)
    register: Registration | None = None  # publish the served models into a cluster
    hold_seconds: float = 300.0  # a request for a model still loading waits this long


def _local_flow_control() -> FlowControl:
    """The gateway's default flow control, with batch work only in the gaps.

    Batch requests wait until interactive ones have left the models alone for a second
    (docs/flow-control.md, idleSeconds): one machine's models share its cores (or one small
    accelerator) with whoever uses it.
    """
    bands = [band.model_copy(update={"idle_seconds": 1.0}) if band.name == "batch" else band
             for band in FlowControl().bands]
    return FlowControl(bands=bands)


LOCAL_FLOW_CONTROL = _local_flow_control()
