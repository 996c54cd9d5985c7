"""Router benchmark: prefix-aware routing, the router's own cost, and a cold start.

Everything runs as separate processes on loopback: `llmop gateway` with the routes the
router builds (the same Gateway code; the router only adds watches, which are off the
request path), simulated replicas with a prefix cache (bench/router/replica.py), and the
fast upstream of bench/gateway. Three parts, each against a baseline in the same run:

1. Shared-prefix workload over 4 replicas (each caches 8 prefixes): 32 customers, each a
   long system prompt and several turns, 8 at a time. Time to first token (mean, p50, p99),
   prefix-cache hit rate and req/s for prefix-hash against random choice (the gateway's
   equal-weight strategy, what round-robin approximates) and least-load.
2. Overhead: p50 and p99 at one connection (wrk) of a plain route against the router's
   route shape (prefix-hash over replicas, hold), both in front of the same upstream, with
   the upstream alone as the floor.
3. Cold start: a request for a model with no replica is held; the replica starts after a
   fixed delay and the route is updated (what the router does when the EndpointSlice says
   ready). First byte minus the moment the replica was ready; nothing lost.

    python bench/router/run.py [--requests 384] [--concurrency 8] [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LLMOP = str(Path(sys.executable).parent / "llmop")
REPLICAS = 4

_spec = importlib.util.spec_from_file_location("gateway_bench", ROOT / "bench/gateway/run.py")
assert _spec is not None and _spec.loader is not None
gateway_bench = importlib.util.module_from_spec(_spec)
sys.modules["gateway_bench"] = gateway_bench  # its dataclasses look their module up
_spec.loader.exec_module(gateway_bench)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def processes(*argvs: list[str], env: dict[str, str] | None = None) -> Iterator[None]:
    procs = [subprocess.Popen(a, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env=env) for a in argvs]
    try:
        yield
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=10)


async def until_up(url: str, method: str = "GET", timeout: float = 30) -> None:
    async with aiohttp.ClientSession() as http:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(aiohttp.ClientError):
                async with http.request(method, url) as r:
                    if r.status < 500:
                        return
            await asyncio.sleep(0.1)  # a process starting: nothing to wait on
    raise TimeoutError(url)


def gateway_config(directory: Path, route: dict[str, Any], port: int) -> Path:
    path = directory / f"gateway-{port}.yaml"
    path.write_text(yaml.safe_dump({"listen": {"host": "127.0.0.1", "port": port},
                                    "routes": [route]}))
    return path


def conversations(customers: int, turns: int, prompt_chars: int, seed: int = 7
                  ) -> list[list[dict[str, str]]]:
    """Every request: a long system prompt per customer x turns, interleaved.

    Turns keep their order within each conversation.
    """
    rng = random.Random(seed)
    filler = " ".join(f"rule{n}" for n in range(prompt_chars // 7))[:prompt_chars]
    queues = [[[{"role": "system", "content": f"You serve customer {c}. {filler}"},
                {"role": "user", "content": f"question {t}"}] for t in range(turns)]
              for c in range(customers)]
    out = []
    while any(queues):
        queue = rng.choice([q for q in queues if q])
        out.append(queue.pop(0))
    return out


async def workload(url: str, requests: list[list[dict[str, str]]], concurrency: int
                   ) -> tuple[list[float], float]:
    """Time to first token of each request (ms), and the run's requests per second."""
    gate = asyncio.Semaphore(concurrency)
    ttfts: list[float] = []

    async def one(http: aiohttp.ClientSession, messages: list[dict[str, str]]) -> None:
        async with gate:
            started = time.perf_counter()
            async with http.post(url, json={"model": "bench", "stream": True,
                                            "messages": messages}) as r:
                assert r.status == 200, await r.text()
                async for line in r.content:
                    if line.startswith(b"data: {"):
                        ttfts.append((time.perf_counter() - started) * 1e3)
                        break
                await r.read()

    started = time.perf_counter()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        await asyncio.gather(*(one(http, m) for m in requests))
    return ttfts, len(requests) / (time.perf_counter() - started)


async def hit_rate(ports: list[int]) -> float:
    hits = misses = 0.0
    async with aiohttp.ClientSession() as http:
        for port in ports:
            async with http.get(f"http://127.0.0.1:{port}/metrics") as r:
                text = await r.text()
            counts = dict(re.findall(r"^(llmop_bench_prefix_\w+) (\S+)$", text, re.M))
            hits += float(counts["llmop_bench_prefix_hits"])
            misses += float(counts["llmop_bench_prefix_misses"])
    return hits / max(1.0, hits + misses)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def chats(tenants: int, users: int, turns: int, *, system_chars: int, turn_chars: int,
          seed: int = 5) -> list[list[dict[str, str]]]:
    """Multi-turn chats: each tenant's system prompt, each user's history growing by a turn.

    Turn t of a conversation is its system prompt, the t earlier questions and answers
    (``turn_chars`` each pair), and a new question; conversations interleave, each in order.
    """
    rng = random.Random(seed)

    def text(label: str, size: int) -> str:
        return (label + " " + " ".join(f"w{n}" for n in range(size // 4)))[:size]

    queues = []
    for t in range(tenants):
        system = {"role": "system", "content": text(f"You are tenant {t}'s assistant.",
                                                    system_chars)}
        for u in range(users):
            history: list[dict[str, str]] = [system]
            queue = []
            for turn in range(turns):
                question = {"role": "user",
                            "content": text(f"t{t} u{u} q{turn}", turn_chars * 3 // 10)}
                queue.append([*history, question])
                history = [*history, question, {"role": "assistant", "content": text(
                    f"t{t} u{u} a{turn}", turn_chars * 7 // 10)}]
            queues.append(queue)
    out = []
    while any(queues):
        queue = rng.choice([q for q in queues if q])
        out.append(queue.pop(0))
    return out


def hot_share(work: list[list[dict[str, str]]], share: float, seed: int = 11
              ) -> list[list[dict[str, str]]]:
    """The same requests, with ``share`` of them rewritten to the first customer's prompt."""
    rng = random.Random(seed)
    hot_system = work[0][0]
    for customer_first in work:
        if customer_first[0]["content"].startswith("You serve customer 0."):
            hot_system = customer_first[0]
            break
    return [[hot_system, m[1]] if rng.random() < share else m for m in work]


async def prefix_part(directory: Path, args: argparse.Namespace, prefill: str,
                      concurrency: int, *, hot: float = 0.0, warm: bool = False,
                      chat: bool = False) -> list[str]:
    """One table: each strategy over the same requests, the first as the baseline.

    ``chat``: multi-turn chats (chats()) instead of one question per request.
    ``warm``: before the measured run, every customer's system prompt is sent once through
    the same route (unmeasured), as a service that has been up for a while has seen its
    customers; otherwise every customer's first turn misses, whatever the strategy.
    """
    ports = [free_port() for _ in range(args.replicas)]
    replicas = [[sys.executable, str(HERE / "replica.py"), "--port", str(p), "--cache",
                 str(args.cache), "--prefill", prefill] for p in ports]
    if chat:
        work = chats(args.tenants, args.users, args.chat_turns,
                     system_chars=args.prompt_chars // 2, turn_chars=1000)
    else:
        work = conversations(args.customers, args.turns, args.prompt_chars)
    if hot:
        work = hot_share(work, hot)
    rows = []
    with processes(*replicas):
        for port in ports:
            await until_up(f"http://127.0.0.1:{port}/metrics")
        baseline_mean = None
        for balancing, label in (
                ({"strategy": "weighted"}, "random, equal weights (baseline)"),
                ({"strategy": "least-load"}, "least-load"),
                ({"strategy": "prefix-hash", "loadBound": 1.25},
                 "prefix-hash, load bound 125% (KubeAI's default)"),
                ({"strategy": "prefix-hash"}, "prefix-hash, load bound 200% (default)"),
                ({"strategy": "prefix-hash", "loadBound": 4.0}, "prefix-hash, load bound 400%"),
                ({"strategy": "prefix-cache"}, "prefix-cache, load bound 200% (default)")):
            port = free_port()
            route = {"name": "bench", "models": ["bench"],
                     "upstreams": [{"name": f"r{i}", "baseUrl": f"http://127.0.0.1:{p}/v1",
                                    "auth": "none"} for i, p in enumerate(ports)],
                     "balancing": balancing}
            config = gateway_config(directory, route, port)
            async with aiohttp.ClientSession() as http:
                for p in ports:
                    await http.post(f"http://127.0.0.1:{p}/reset")
            url = f"http://127.0.0.1:{port}/v1/chat/completions"
            with processes([LLMOP, "gateway", "--config", str(config)]):
                await until_up(f"http://127.0.0.1:{port}/health")
                if warm:
                    firsts = {m[0]["content"]: [m[0], {"role": "user", "content": "hello"}]
                              for m in work}
                    await workload(url, list(firsts.values()), concurrency)
                    async with aiohttp.ClientSession() as http:
                        for p in ports:
                            await http.post(f"http://127.0.0.1:{p}/reset?cache=keep")
                ttfts, rps = await workload(url, work, concurrency)
            hits = await hit_rate(ports)
            mean = statistics.fmean(ttfts)
            baseline_mean = baseline_mean or mean
            rows.append(f"| {label} | {mean:.0f} | {pct(ttfts, 0.5):.0f} | "
                        f"{pct(ttfts, 0.99):.0f} | {hits:.0%} | {rps:.1f} | "
                        f"{baseline_mean / mean:.1f}x |")
    return rows


def overhead_part(directory: Path, seconds: int) -> list[str]:
    upstream_port = free_port()
    upstream = f"http://127.0.0.1:{upstream_port}/v1"
    plain_port = free_port()
    plain = gateway_config(directory, {"name": "bench", "models": ["bench"],
                                       "upstream": {"baseUrl": upstream, "auth": "none"}},
                           plain_port)
    routers = {}
    for strategy in ("prefix-hash", "prefix-cache"):
        port = free_port()
        routers[port] = (strategy, gateway_config(directory, {
            "name": "ns/bench", "models": ["bench"], "aliases": ["ns/bench"],
            "upstreams": [{"name": f"r{i}", "baseUrl": upstream, "auth": "none",
                           "model": "bench"} for i in range(REPLICAS)],
            "balancing": {"strategy": strategy}, "hold": {"seconds": 300},
            "retry": {"attempts": 3, "backoffInitialSeconds": 0.05}}, port))
    rows = []
    with processes([sys.executable, str(ROOT / "bench/gateway/upstream.py"),
                    str(upstream_port)],
                   [LLMOP, "gateway", "--config", str(plain)],
                   *([LLMOP, "gateway", "--config", str(c)] for _, c in routers.values())):
        for port in (upstream_port, plain_port, *routers):
            gateway_bench.wait_ready(f"http://127.0.0.1:{port}/v1/chat/completions", 30)
        results = {}
        for name, port in (("upstream alone (floor)", upstream_port),
                           ("gateway, plain route (baseline)", plain_port),
                           *((f"router's route: {strategy} over 4, hold", port)
                             for port, (strategy, _) in routers.items())):
            results[name] = gateway_bench.wrk(f"http://127.0.0.1:{port}/v1/chat/completions",
                                              1, seconds)
        base = results["gateway, plain route (baseline)"]["p50"]
        for name, r in results.items():
            rows.append(f"| {name} | {r['p50']:.3f} | {r['p99']:.3f} | {r['rps']:.0f} | "
                        f"{r['p50'] - base:+.3f} |")
    return rows


async def _first_bytes(http: aiohttp.ClientSession, url: str, requests: int,
                       model: str = "bench") -> tuple[list[float], list[int]]:
    """Send ``requests`` streamed completions at once: when each first byte came, statuses."""
    first: list[float] = []

    async def ask() -> int:
        async with http.post(url, json={"model": model, "stream": True, "messages": [
                {"role": "user", "content": "hi"}]}) as r:
            status = r.status
            async for line in r.content:
                if line.startswith(b"data: {"):
                    if line.startswith(b'data: {"error"'):  # a held stream that timed out
                        status = 503
                    else:
                        first.append(time.perf_counter())
                    break
            await r.read()
            return status

    statuses = await asyncio.gather(*(ask() for _ in range(requests)))
    return first, list(statuses)


async def direct_burst(http: aiohttp.ClientSession, requests: int
                       ) -> tuple[list[float], int]:
    """The baseline: the same burst sent to a freshly started, ready replica.

    Milliseconds to each first byte, sorted, and how many failed.
    """
    port = free_port()
    with processes([sys.executable, str(HERE / "replica.py"), "--port", str(port)]):
        await until_up(f"http://127.0.0.1:{port}/metrics")
        sent = time.perf_counter()
        first, statuses = await _first_bytes(
            http, f"http://127.0.0.1:{port}/v1/chat/completions", requests)
    return sorted((t - sent) * 1e3 for t in first), sum(s != 200 for s in statuses)


def cold_rows(requests: int, held: str, after: list[float], lost: int,
              baseline: tuple[list[float], int]) -> list[str]:
    """The cold-start table's two rows: the baseline burst, then the held one."""
    direct, direct_lost = baseline
    after = sorted(after)
    return [f"| {requests} at once to a ready replica, directly (baseline) | "
            f"{statistics.median(direct):.0f} | {direct[-1]:.0f} | {direct_lost} | - |",
            f"| {requests} {held} | {statistics.median(after):.0f} | {after[-1]:.0f} | "
            f"{lost} | {statistics.median(after) - statistics.median(direct):+.0f} |"]


async def cold_start_part(start_delay: float, requests: int) -> list[str]:
    """Held requests released at ready, against the same burst sent to a ready replica."""
    port, replica_port = free_port(), free_port()
    held_route = {"name": "ns/bench", "models": ["bench"], "upstreams": [],
                  "hold": {"seconds": 60, "reason": "Starting", "keepaliveSeconds": 1}}
    # `llmop gateway` takes its routes once; the router reconfigures its Gateway in process
    # when an EndpointSlice changes, so this part runs a Gateway here and does the same.
    from aiohttp import web  # noqa: PLC0415

    from llm_operator.gateway.app import Gateway  # noqa: PLC0415
    from llm_operator.gateway.settings.config import parse_config  # noqa: PLC0415

    gateway = Gateway(parse_config({"routes": [held_route]}))
    runner = web.AppRunner(gateway.app(), handler_cancellation=True, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
            asked = time.perf_counter()
            held = asyncio.create_task(_first_bytes(
                http, f"http://127.0.0.1:{port}/v1/chat/completions", requests))
            await asyncio.sleep(start_delay)  # the pod pulling, loading: the model's start
            with processes([sys.executable, str(HERE / "replica.py"), "--port",
                            str(replica_port)]):
                await until_up(f"http://127.0.0.1:{replica_port}/metrics")
                ready = time.perf_counter()
                gateway.reconfigure(parse_config({"routes": [{
                    **held_route, "upstreams": [{"baseUrl":
                                                 f"http://127.0.0.1:{replica_port}/v1",
                                                 "auth": "none"}]}]}))
                first, statuses = await held
            baseline = await direct_burst(http, requests)
    finally:
        await runner.cleanup()
    return cold_rows(requests, f"held through the router, replica ready after "
                     f"{ready - asked:.1f} s", [(t - ready) * 1e3 for t in first],
                     sum(s != 200 for s in statuses), baseline)


async def report_ready(kube: Any, model: Any, host: str, port: int) -> float:
    """Create the model's pod and report it Ready as a kubelet would; when that was."""
    from llm_operator.render.meta import selector_labels  # noqa: PLC0415

    namespace, name = model.namespace, f"{model.name}-0"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "labels": selector_labels(model)},
        "spec": {"nodeName": "bench-node", "containers": [{
            "name": "inference-server", "image": "vllm",
            "ports": [{"name": "http", "containerPort": port}]}]}}
    await kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", body=pod)
    ready = time.perf_counter()
    await kube.merge_patch("v1", "pods", namespace, name, subresource="status", body={
        "status": {"phase": "Running", "podIP": host, "podIPs": [{"ip": host}],
                   "conditions": [{"type": "Ready", "status": "True",
                                   "lastTransitionTime": "2026-11-23T00:00:00Z"}]}})
    return ready


async def cluster_part(requests: int) -> list[str]:
    """Cold start on a real API server: the EndpointSlice controller and the watch included.

    `llmop router` (its own process, admin kubeconfig) routes a model with no pod; held
    requests wait; the bench creates the pod and reports it Ready as a kubelet would, with
    a replica serving it. First byte minus that moment, against the same burst sent to a
    ready replica directly.
    """
    sys.path.insert(0, str(ROOT / "tests"))
    from llm_operator.api.validation import parse_llmmodel  # noqa: PLC0415
    from llm_operator.kube import Kube, from_kubeconfig  # noqa: PLC0415
    from llm_operator.render.networking import service  # noqa: PLC0415

    from controlplane import control_plane  # noqa: PLC0415

    sys.path.pop(0)
    namespace, api = "bench", "ai.example.io/v1alpha1"
    doc = yaml.safe_load((ROOT / "config/samples/gemma4-31b-nvidia.yaml").read_text())
    doc["metadata"]["namespace"] = namespace
    router_port, replica_port = free_port(), free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("10.255.255.255", 1))  # this machine's address (slices refuse loopback)
        host = str(probe.getsockname()[0])
    with control_plane() as plane:
        plane.kubectl("apply", "-f", str(ROOT / "config/crd/bases"))
        plane.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        plane.kubectl("create", "namespace", namespace)
        plane.add_node("bench-node", {}, {"cpu": "8", "memory": "32Gi"})  # slices need it
        env = {"KUBECONFIG": str(plane.kubeconfig), "PATH": "/usr/bin:/bin"}
        async with Kube(from_kubeconfig(str(plane.kubeconfig))) as kube:
            created = await kube.request("POST", f"/apis/{api}/namespaces/{namespace}/"
                                         "llmmodels", body=doc)
            model = parse_llmmodel(created)
            await kube.request("POST", f"/api/v1/namespaces/{namespace}/services",
                               body=service(model, "inference", None))
            router = subprocess.Popen(
                [LLMOP, "router", "-n", namespace, "--host", "127.0.0.1", "--port",
                 str(router_port), "--keepalive-seconds", "1"], env=env,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                await until_up(f"http://127.0.0.1:{router_port}/health")
                async with aiohttp.ClientSession(
                        connector=aiohttp.TCPConnector(limit=0)) as http:
                    held = asyncio.create_task(_first_bytes(
                        http, f"http://127.0.0.1:{router_port}/v1/chat/completions",
                        requests, model=model.spec.model_id))
                    while True:  # until every request is held at the router
                        async with http.get(f"http://127.0.0.1:{router_port}/scale/"
                                            f"{namespace}/{model.name}") as r:
                            if (await r.json()).get("held") == requests:
                                break
                        await asyncio.sleep(0.05)
                    with processes([sys.executable, str(HERE / "replica.py"), "--host", host,
                                    "--port", str(replica_port)]):
                        await until_up(f"http://{host}:{replica_port}/metrics")
                        ready = await report_ready(kube, model, host, replica_port)
                        first, statuses = await held
                    baseline = await direct_burst(http, requests)
            finally:
                router.terminate()
                router.wait(timeout=30)
    return cold_rows(requests, "held by `llmop router`; the pod reported Ready on the API "
                     "server", [(t - ready) * 1e3 for t in first],
                     sum(s != 200 for s in statuses), baseline)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--cache", type=int, default=144,
                        help="1,000-character blocks a replica caches (144: 16 system "
                        "prompts with a turn)")
    parser.add_argument("--tenants", type=int, default=8, help="multi-turn chats: tenants")
    parser.add_argument("--users", type=int, default=6,
                        help="multi-turn chats: users per tenant (0: skip that table)")
    parser.add_argument("--chat-turns", type=int, default=8, help="multi-turn chats: turns")
    parser.add_argument("--customers", type=int, default=32, help="distinct system prompts")
    parser.add_argument("--turns", type=int, default=12, help="requests per customer")
    parser.add_argument("--prompt-chars", type=int, default=8000,
                        help="system prompt length (~4 characters a token)")
    parser.add_argument("--concurrency", default="8",
                        help="part 1's requests at a time (comma-separated levels)")
    parser.add_argument("--caches", default="cold,warm",
                        help="part 1: cold (measure from empty caches) and/or warm (send "
                        "every customer's prompt once, unmeasured, first)")
    parser.add_argument("--hot", default="0.5,1",
                        help="part 1, last tables: the share of requests from one customer "
                        "(1: one system prompt for all), at the first prefill model, level "
                        "and caches (0: none)")
    parser.add_argument("--prefill", default="serial,parallel",
                        help="part 1's replica models, the first also for 1b: serial "
                        "(prefills share a GPU's compute) and/or parallel (they do not)")
    parser.add_argument("--parts", default="1,2,3,4", help="which parts to run (4 needs "
                        "../shared/k8s and etcd, as `make test` installs them)")
    parser.add_argument("--seconds", type=int, default=5, help="wrk duration per target")
    parser.add_argument("--start-delay", type=float, default=3.0,
                        help="cold start: seconds until the replica is ready")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is needed: apt-get install wrk")
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        parts = args.parts.split(",")
        print(f"## 1. Shared-prefix workload: {args.replicas} replicas caching {args.cache} "
              f"1,000-character blocks each, {args.customers} customers x {args.turns} "
              f"questions with {args.prompt_chars}-character system prompts")
        prefills = args.prefill.split(",")
        levels = [int(c) for c in str(args.concurrency).split(",")]
        warmth = [w == "warm" for w in args.caches.split(",")]
        cases = [(p, c, 0.0, w) for p in prefills for c in levels for w in warmth]
        cases += [(prefills[0], levels[0], float(h), warmth[0])
                  for h in str(args.hot).split(",") if float(h)]
        for prefill, concurrency, hot, warm in cases if "1" in parts else []:
            print(f"\n### Prefill {prefill}, {concurrency} at a time, "
                  + ("warm caches (every customer seen once before)" if warm else
                     "cold caches (every customer's first turn misses)")
                  + (", one system prompt for every request" if hot == 1 else
                     f", one customer sending {hot:.0%} of the requests (what the load bound "
                     "is for)" if hot else "") + "\n")
            print("| strategy | mean TTFT ms | p50 | p99 | prefix-cache hits | req/s | "
                  "mean TTFT vs baseline |")
            print("|---|---|---|---|---|---|---|")
            for row in await prefix_part(directory, args, prefill, concurrency, hot=hot,
                                         warm=warm):
                print(row, flush=True)
        if "1" in parts and args.users:
            print(f"\n### Multi-turn chats: {args.tenants} tenants' system prompts of "
                  f"{args.prompt_chars // 2} characters, {args.users} users each, "
                  f"{args.chat_turns} turns of 1,000 characters; prefill {prefills[0]}, "
                  f"{levels[0]} at a time, cold caches\n")
            print("| strategy | mean TTFT ms | p50 | p99 | prefix-cache hits | req/s | "
                  "mean TTFT vs baseline |")
            print("|---|---|---|---|---|---|---|")
            for row in await prefix_part(directory, args, prefills[0], levels[0], chat=True):
                print(row, flush=True)
        print("\n## 2. Overhead at one connection (wrk, small chat completion)\n")
        print("| target | p50 ms | p99 ms | req/s | p50 vs baseline ms |")
        print("|---|---|---|---|---|")
        for row in overhead_part(directory, args.seconds) if "2" in parts else []:
            print(row, flush=True)
        print("\n## 3. Cold start: held requests released when the replica is ready\n")
        print("| case | first byte after the replica was ready, median ms | max ms | lost "
              "| median vs baseline ms |")
        print("|---|---|---|---|---|")
        for row in await cold_start_part(args.start_delay, 50) if "3" in parts else []:
            print(row, flush=True)
        if "4" in parts:
            print("\n## 4. Cold start on a real API server (EndpointSlice controller, watch)\n")
            print("| case | first byte after the pod was reported Ready, median ms | max ms "
                  "| lost | median vs baseline ms |")
            print("|---|---|---|---|---|")
            for row in await cluster_part(20):
                print(row, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
