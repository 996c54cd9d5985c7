"""A pool member the engine could not load: its reason from the engine, or its pod's log.

The API server's pods/log answers are played by a small HTTP server (the emulator serves
no logs; tests/e2e/test_model_pool_on_node.py reads a real one through the real node).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from llm_operator.api.validation import parse_llmmodel
from llm_operator.kube import Connection, Kube
from llm_operator.operator.pooled import engine_said, load_failure

LOG = """\
0.01.000.000 I srv          load: spawning server instance with name=org/one on port 40123
[40123] 0.00.100.000 E llama_model_load: error loading model: missing tensor 'output.weight'
0.01.300.000 I srv           run: instance name=org/one exited with status 1
"""


def member() -> Any:
    return parse_llmmodel({
        "apiVersion": "ai.example.io/v1alpha1", "kind": "LLMModel",
        "metadata": {"name": "one", "namespace": "ai-models"},
        "spec": {"modelId": "org/one", "deploymentMode": "local", "acceleratorVendor": "cpu",
                 "inferenceEngine": "llamacpp", "totalParametersBillions": 0.27,
                 "quantization": "GGUF-Q4_K_M", "resources": {"acceleratorCount": 0},
                 "modelSource": {"type": "file", "path": "/models/one.gguf"},
                 "pool": {"name": "small"}}})


def pod(name: str, phase: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"phase": phase}}


Api = tuple[Kube, list[dict[str, Any]], list[tuple[str, dict[str, str]]]]


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    """The pool's pods (a list the test fills) and their logs (403 for -forbidden): which
    logs were asked for, recorded."""
    pods: list[dict[str, Any]] = []
    asked: list[tuple[str, dict[str, str]]] = []

    async def listed(request: web.Request) -> web.StreamResponse:
        assert request.query["labelSelector"] == \
            "app=small-pool,ai.example.io/pool=small"
        return web.json_response({"kind": "PodList", "items": pods})

    async def logs(request: web.Request) -> web.StreamResponse:
        asked.append((request.match_info["pod"], dict(request.query)))
        if request.match_info["pod"].endswith("forbidden"):
            return web.json_response({"kind": "Status", "reason": "Forbidden", "message":
                                      "pods/log is forbidden"}, status=403)
        return web.Response(text=LOG)

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/ai-models/pods", listed)
    app.router.add_get("/api/v1/namespaces/ai-models/pods/{pod}/log", logs)
    async with TestServer(app) as server, \
            Kube(Connection(server=str(server.make_url("")).rstrip("/"))) as kube:
        yield kube, pods, asked


@pytest.mark.parametrize(("pods", "reason", "read"), [
    ([pod("small-pool-a", "Running")], "missing tensor 'output.weight'", ["small-pool-a"]),
    # a pod that is not running has no engine log; one the operator may not read is skipped
    ([pod("small-pool-b", "Pending"), pod("small-pool-forbidden", "Running"),
      pod("small-pool-a", "Running")], "missing tensor 'output.weight'",
     ["small-pool-forbidden", "small-pool-a"]),
    ([pod("small-pool-forbidden", "Running")], None, ["small-pool-forbidden"]),
    ([], None, []),
])
async def test_the_reason_is_the_engines_from_a_running_pods_log(
        api: Api, pods: list[dict[str, Any]], reason: str | None, read: list[str]) -> None:
    kube, listed, asked = api
    listed.extend(pods)
    assert await load_failure(kube, member()) == reason
    assert [name for name, _ in asked] == read
    assert all(query == {"container": "pool-server", "tailLines": "2000"}
               for _, query in asked)


def _models(status: dict[str, Any]) -> dict[str, Any]:
    """A ``GET /models`` answer with org/one's status (and another member's)."""
    return {"data": [{"id": "org/two", "status": {"value": "loaded"}},
                     {"id": "org/one", "status": status}]}


@pytest.mark.parametrize(("case", "body", "expected"), [
    ("loaded", _models({"value": "loaded"}), ("loaded", None)),
    ("llama-server's router: failed, its log says why",
     _models({"value": "unloaded", "failed": True}), ("failed", None)),
    ("a vLLM pool's gateway: failed, and why",
     _models({"value": "unloaded", "failed": True, "reason": "CUDA out of memory"}),
     ("failed", "CUDA out of memory")),
    ("not listed", {"data": [{"id": "org/two", "status": {"value": "loaded"}}]}, None),
    ("not the answer's shape", ["org/one"], None),
])
def test_what_the_engine_says_of_a_member(case: str, body: Any,
                                          expected: tuple[str, str | None] | None) -> None:
    assert engine_said(body, "org/one") == expected
