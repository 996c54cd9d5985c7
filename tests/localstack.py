"""Run `llmop up`'s runtime in a test: a directory of YAML, the real model, loopback ports."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import os
import select
import shutil
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from llm_operator.local import llama_build
from llm_operator.local.options import Options
from llm_operator.local.placement import Machine
from llm_operator.local.process import Timing
from llm_operator.local.runtime import Runtime
from llm_operator.local.state import StateDir

from samples import LOCAL_EXAMPLES, local_doc

MACHINE = Machine(cpus=2, memory_gib=16.0)  # what the tests claim, whatever runs them
QUICK = Timing(backoff_initial=0.2, backoff_max=1.0, stop_grace=5.0)
SETTLE_SECONDS = 120.0  # a cold start on a busy 2-core machine


@functools.cache
def llama_server() -> Path:
    """The llama-server `llmop setup` builds (compiled on first use, then from the cache)."""
    return llama_build.build()


def write_model(directory: Path, doc: Any, name: str | None = None) -> Path:
    path = directory / f"{name or doc['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def gemma(**spec: Any) -> dict[str, Any]:
    """The embedded default's document, with spec fields replaced."""
    doc = copy.deepcopy(local_doc("gemma3-270m"))
    doc["spec"].update(spec)
    return doc


def example_dir(directory: Path) -> Path:
    """A copy of examples/local to edit freely."""
    shutil.copytree(LOCAL_EXAMPLES, directory)
    return directory


def row(snapshot: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in snapshot["models"] if r["name"] == name)


def options(directory: Path, state: Path, cache: Path, *,
            env: Mapping[str, str] | None = None, timing: Timing = QUICK) -> Options:
    """Loopback ports picked by the OS; no API keys unless given."""
    if env is None:
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    return Options(directory=directory, state=StateDir(state), cache_dir=cache,
                   gateway_port=0, mcp_port=0, env=env, machine=MACHINE,
                   scan_seconds=0.1, timing=timing, llama_server=llama_server())


@contextlib.asynccontextmanager
async def running(opts: Options) -> AsyncIterator[Runtime]:
    """The runtime, once every model has settled; stopped (and checked stopped) after."""
    runtime = Runtime(opts)
    task = asyncio.create_task(runtime.run())
    try:
        waiter = asyncio.create_task(runtime.until(lambda s: s["settled"], SETTLE_SECONDS))
        done, _ = await asyncio.wait({waiter, task}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            waiter.cancel()
            task.result()  # raises what stopped it
        waiter.result()
        yield runtime
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def exits_within(pid: int, timeout: float) -> bool:
    """Wait for any process (not only a child) to exit: its pidfd turns readable."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], timeout)
        return bool(readable)
    finally:
        os.close(fd)
