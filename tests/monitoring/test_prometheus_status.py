"""The operator's status metrics read through a real Prometheus scraping a fake vLLM."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
import yaml
from aiohttp import web

from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.api.validation import parse_llmmodel
from llm_operator.operator.prometheus import status_metrics

from samples import sample_doc

MODEL = "google/gemma-4-31b-it"
RATE = 2.0  # requests per second the fake engine reports
LATENCY = 0.8  # seconds per request
POD = "gemma4-31b-nvidia-5d8f9c7b6d-x2x9k"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


HISTORY_SECONDS = 600  # backfilled, so rate() over 5m sees a full window at once
T0 = time.time() - HISTORY_SECONDS  # the counters' origin, shared by history and live data


def exposition(now: float, extra_labels: str = "", stamp: bool = False) -> list[str]:
    """vLLM's real metric names and types at wall-clock time ``now``."""
    count = RATE * (now - T0)
    labels = f'model_name="{MODEL}"{extra_labels}'
    ts = f" {now:.3f}" if stamp else ""
    return [
        f'vllm:e2e_request_latency_seconds_bucket{{{labels},le="0.5"}} 0{ts}',
        f'vllm:e2e_request_latency_seconds_bucket{{{labels},le="1.0"}} {count}{ts}',
        f'vllm:e2e_request_latency_seconds_bucket{{{labels},le="+Inf"}} {count}{ts}',
        f"vllm:e2e_request_latency_seconds_sum{{{labels}}} {count * LATENCY}{ts}",
        f"vllm:e2e_request_latency_seconds_count{{{labels}}} {count}{ts}",
    ]


HEADER = ["# HELP vllm:e2e_request_latency_seconds Histogram of end to end request latency.",
          "# TYPE vllm:e2e_request_latency_seconds histogram"]


def backfill(data: Path, port: int) -> None:
    """The last ten minutes of the same series, written as TSDB blocks with promtool."""
    target = f',instance="127.0.0.1:{port}",job="vllm",namespace="ai-models",pod="{POD}"'
    lines = list(HEADER)
    for at in range(int(T0), int(time.time()) - 5, 15):
        lines += exposition(float(at), target, stamp=True)
    source = data.parent / "history.om"
    source.write_text("\n".join([*lines, "# EOF", ""]))
    subprocess.run([shutil.which("promtool") or "promtool", "tsdb", "create-blocks-from",
                    "openmetrics", str(source), str(data)], check=True, capture_output=True,
                   timeout=120)


@pytest.fixture
async def fake_vllm() -> AsyncIterator[int]:
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text="\n".join([*HEADER, *exposition(time.time()), ""]),
                            content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield port
    await runner.cleanup()


@pytest.fixture
def prometheus(tmp_path: Path, fake_vllm: int) -> Iterator[str]:
    binary = shutil.which("prometheus")
    assert binary, "prometheus not found: `make test` installs it (apt-get install prometheus)"
    backfill(tmp_path / "data", fake_vllm)
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "vllm", "static_configs": [{
            "targets": [f"127.0.0.1:{fake_vllm}"],
            "labels": {"namespace": "ai-models", "pod": POD}}]}],
    }))
    proc = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def gemma() -> LLMModel:
    return parse_llmmodel(sample_doc("gemma4-31b-nvidia"))


async def test_status_metrics_come_from_real_prometheus(prometheus: str) -> None:
    model = gemma()
    deadline = time.monotonic() + 60
    async with aiohttp.ClientSession() as session:
        rpm, latency = None, None
        while time.monotonic() < deadline and (rpm is None or latency is None):
            rpm, latency = await status_metrics(session, prometheus, model)
            if rpm is None or latency is None:
                await asyncio.sleep(0.5)  # polling Prometheus until its scrapes hold data
    assert latency == round(LATENCY * 1000)
    assert rpm is not None and abs(rpm - RATE * 60) <= RATE * 60 * 0.15


async def test_no_prometheus_means_unset_fields_not_an_error() -> None:
    async with aiohttp.ClientSession() as session:
        assert await status_metrics(session, f"http://127.0.0.1:{free_port()}", gemma()) == (
            None, None)
        assert await status_metrics(session, None, gemma()) == (None, None)


async def test_engines_without_metrics_query_nothing() -> None:
    cpu = parse_llmmodel(sample_doc("qwen35-9b-cpu"))
    async with aiohttp.ClientSession() as session:
        assert await status_metrics(session, "http://127.0.0.1:9", cpu) == (None, None)
