"""`llmop router` on the real API server: models and the EndpointSlices the controller
manager makes from their ready pods become one OpenAI endpoint; a model with no replica
holds its requests until one is ready."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
import yaml

from llm_operator.access.keyring import KeyringError, digest
from llm_operator.api import labels as L
from llm_operator.api.validation import parse_llmmodel
from llm_operator.kube import Connection, Kube
from llm_operator.leader import LeaseTerms
from llm_operator.render.meta import selector_labels
from llm_operator.render.networking import service
from llm_operator.router.app import Router, serve
from llm_operator.router.keys_secret import SecretKeyStore
from llm_operator.router.routes import Options

from browser import administer_keys, curl_models
from controlplane import ControlPlane
from fake_vllm import FakeVllm, host_ip
from redisserver import free_port
from samples import sample_doc

REPO = Path(__file__).resolve().parents[2]
ROUTER_USER = "system:serviceaccount:llm-operator-system:llmop-router"

API = "ai.example.io/v1alpha1"
MODEL_ID = "google/gemma-4-31b-it"
CHAT = {"model": MODEL_ID, "messages": [{"role": "user", "content": "hi"}]}


@dataclass
class Cluster:
    """The test's side: models, the pods the kubelet would run, and the router."""

    kube: Kube
    namespace: str
    router: Router
    url: str
    replicas: list[FakeVllm] = field(default_factory=list)

    async def model(self, name: str, *, known: bool = False, **spec: Any) -> dict[str, Any]:
        """Create a model and its Service; with ``known``, until the router routes it."""
        doc = copy.deepcopy(sample_doc("gemma4-31b-nvidia"))
        doc["metadata"].update(name=name, namespace=self.namespace)
        doc["spec"].update(spec)
        created: dict[str, Any] = await self.kube.request(
            "POST", f"/apis/{API}/namespaces/{self.namespace}/llmmodels", body=doc)
        # the Service the operator renders for it (the operator is not running here)
        svc = service(parse_llmmodel(created), "inference", None)
        await self.kube.request("POST", f"/api/v1/namespaces/{self.namespace}/services",
                                body=svc)
        if known:
            await self.known(name)
        return created

    async def replica(self, model: str, index: int) -> FakeVllm:
        """A pod of ``model`` as a kubelet reports it Ready, served by a fake vLLM."""
        fake = FakeVllm(MODEL_ID)
        await fake.start(host=host_ip())
        self.replicas.append(fake)
        doc = parse_llmmodel(await self.kube.get(API, "llmmodels", self.namespace, model))
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"{model}-{index}", "namespace": self.namespace,
            "labels": selector_labels(doc)},
            "spec": {"nodeName": "accel-nvidia", "containers": [{
                "name": "inference-server", "image": "vllm/vllm-openai:v0.33.0",
                "ports": [{"name": "http", "containerPort": fake.port}]}]}}
        await self.kube.request("POST", f"/api/v1/namespaces/{self.namespace}/pods", body=pod)
        await self.set_ready(f"{model}-{index}", True)
        return fake

    async def set_ready(self, pod: str, ready: bool) -> None:
        stamp = "2026-11-23T00:00:00Z"
        await self.kube.merge_patch("v1", "pods", self.namespace, pod, subresource="status",
                                    body={"status": {
                                        "phase": "Running", "podIP": host_ip(),
                                        "podIPs": [{"ip": host_ip()}],
                                        "conditions": [{"type": "Ready", "status":
                                                        "True" if ready else "False",
                                                        "lastTransitionTime": stamp}]}})

    async def upstreams(self, model: str, count: int, timeout: float = 60) -> None:
        """Until the router routes ``model`` to ``count`` replicas (the slices arrived).

        The controller manager writes the slices; once in a full CI run they took over 30 s
        to show 2 pods. A timeout says what the API server held then, to tell a slow
        controller from a router that missed an event.
        """
        key = (self.namespace, model)
        try:
            async with asyncio.timeout(timeout):
                while len(self.router.table.upstreams.get(key, [])) != count:
                    self.router.rebuilt.clear()
                    await self.router.rebuilt.wait()
        except TimeoutError:
            raise AssertionError(f"the router routes {model} to "
                                 f"{self.router.table.upstreams.get(key)}, not {count} "
                                 f"replica(s); {await self.seen(model)}") from None

    async def seen(self, model: str) -> str:
        """The pods' readiness and the model's EndpointSlices as the API server has them."""
        pods = await self.kube.request("GET", f"/api/v1/namespaces/{self.namespace}/pods")
        ready = {p["metadata"]["name"]: [c["status"] for c in p["status"].get("conditions", [])
                                         if c["type"] == "Ready"] for p in pods["items"]}
        slices = await self.kube.request(
            "GET", f"/apis/discovery.k8s.io/v1/namespaces/{self.namespace}/endpointslices"
            f"?labelSelector=kubernetes.io/service-name={model}")
        held = [(s["metadata"]["name"], s["metadata"].get("labels"), s.get("ports"),
                 [(e["addresses"], e.get("conditions")) for e in s.get("endpoints") or []])
                for s in slices["items"]]
        return f"pods' Ready: {ready}; slices: {held}"

    async def not_ready(self, model: str, phase: str, reason: str, message: str) -> None:
        """The model's status as the operator writes it when it does not serve, and why."""
        await self.kube.merge_patch(API, "llmmodels", self.namespace, model,
                                    subresource="status", body={"status": {
                                        "phase": phase, "conditions": [{
                                            "type": "Ready", "status": "False",
                                            "reason": reason, "message": message,
                                            "lastTransitionTime": "2026-11-23T00:00:00Z"}]}})

    async def known(self, model: str) -> None:
        async with asyncio.timeout(30):
            while (self.namespace, model) not in self.router.table.labels:
                self.router.rebuilt.clear()
                await self.router.rebuilt.wait()

    async def held(self, label: str, count: int) -> None:
        async with asyncio.timeout(30):
            while self.router.gateway.holds.held.get(label, 0) < count:
                await asyncio.sleep(0)  # the router's handlers run on this loop


@contextlib.asynccontextmanager
async def routing(conn: Connection, admin: Kube, namespace: str,
                  hold_seconds: float = 60, peers: tuple[str, str] | None = None,
                  batch_lease: LeaseTerms | None = None,
                  admin_token: str | None = None, keys_secret: tuple[str, str] | None = None,
                  **settings: Any) -> AsyncIterator[Cluster]:
    async with Kube(conn) as kube:
        port = free_port()
        router = Router(kube, [namespace], options=Options(hold_seconds, 0.1),
                        scrape_seconds=0.1, settings=settings, peers=peers, port=port,
                        batch_lease=batch_lease, keys_secret=keys_secret,
                        admin_token=None if admin_token is None
                        else lambda given: given == admin_token)
        ready, stop = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(serve(router, "127.0.0.1", port, ready=ready, stop=stop))
        await ready.wait()
        cluster = Cluster(admin, namespace, router, f"http://127.0.0.1:{port}")
        try:
            yield cluster
        finally:
            stop.set()
            await task
            for fake in cluster.replicas:
                await fake.stop()


async def test_a_model_with_no_replica_holds_its_request_until_one_is_ready(
        router_connection: Connection, admin: Kube, namespace: str) -> None:
    async with routing(router_connection, admin, namespace) as cluster, \
            aiohttp.ClientSession() as http:
        await cluster.model("gemma", known=True)
        label = f"{namespace}/gemma"
        plain = asyncio.create_task(http.post(f"{cluster.url}/v1/chat/completions",
                                              json=CHAT))
        stream = await http.post(f"{cluster.url}/v1/chat/completions",
                                 json={**CHAT, "stream": True})
        assert stream.status == 200
        assert await stream.content.readline() == b": waiting for model (Pending)\n"
        await cluster.held(label, 2)
        async with http.get(f"{cluster.url}/scale/{namespace}/gemma") as r:
            # what KEDA and the built-in autoscaler read
            assert await r.json() == {"pending": 2, "held": 2, "queued": 0, "inFlight": 0,
                                      "waiting": 0}
        async with http.get(f"{cluster.url}/scale") as r:  # every model in one read
            assert await r.json() == {"models": {
                f"{namespace}/gemma": {"pending": 2, "held": 2, "queued": 0,
                                       "inFlight": 0, "waiting": 0}}}
        async with http.get(f"{cluster.url}/metrics") as r:
            assert f'llmop_router_pending_requests{{model="gemma",namespace="{namespace}"}} 2.0' \
                in await r.text()

        fake = await cluster.replica("gemma", 0)  # the controller manager makes its slice
        answer = await plain
        assert answer.status == 200
        assert (await answer.json())["choices"][0]["message"]["content"] == \
            f"answered by {MODEL_ID}"
        text = (await stream.read()).decode()
        words = [json.loads(line[6:])["choices"][0]["delta"]["content"]
                 for line in text.splitlines() if line.startswith("data: {")]
        assert "".join(words) == f"answered by {MODEL_ID}"
        assert fake.served == [MODEL_ID, MODEL_ID]
        assert cluster.router.gateway.holds.held == {}


async def test_an_idle_band_waits_while_the_engine_runs_another_replicas_requests(
        router_connection: Connection, admin: Kube, namespace: str) -> None:
    """The batch band with idleSeconds: a request to an engine that runs requests this
    router did not send (its peer's) waits until a look finds it idle, and that long."""
    flow = {"bands": [{"name": "interactive", "priority": 100},
                      {"name": "standard", "priority": 0},
                      {"name": "batch", "priority": -100, "idleSeconds": 0.3}]}
    async with routing(router_connection, admin, namespace, flowControl=flow) as cluster, \
            aiohttp.ClientSession() as http:
        await cluster.model("gemma", known=True)
        fake = await cluster.replica("gemma", 0)
        await cluster.upstreams("gemma", 1)
        fake.running = 1  # a request the router's other replica sent
        batch = asyncio.create_task(http.post(
            f"{cluster.url}/v1/chat/completions", json=CHAT,
            headers={"x-gateway-inference-objective": "batch"}))
        pool = cluster.router.gateway.flow.pools[f"{namespace}/gemma"]
        async with asyncio.timeout(10):
            while pool.outside == -math.inf:  # until a look has seen it
                await asyncio.sleep(0.01)  # the router's looks run on this loop
        assert pool.queued == 1 and not batch.done()
        fake.running = 0
        answer = await batch
        answered = time.monotonic()
    assert answer.status == 200
    assert answered - pool.outside >= 0.3  # after the last look that found it busy
    assert fake.served == [MODEL_ID]


async def test_names_replicas_and_a_replica_that_dies_mid_burst(
        router_connection: Connection, admin: Kube, namespace: str) -> None:
    async with routing(router_connection, admin, namespace) as cluster:
        await cluster.model("gemma", routing={"strategy": "least-load"})
        first = await cluster.replica("gemma", 0)
        second = await cluster.replica("gemma", 1)
        await cluster.upstreams("gemma", 2)
        client = openai.AsyncOpenAI(base_url=f"{cluster.url}/v1", api_key="unused",
                                    max_retries=0)
        async with client:
            assert [m.id async for m in client.models.list()] == [MODEL_ID]  # aliases: unlisted
            for name in (MODEL_ID, "gemma", f"{namespace}/gemma"):
                answer = await client.chat.completions.create(
                    model=name, messages=[{"role": "user", "content": "hi"}])
                assert answer.choices[0].message.content == f"answered by {MODEL_ID}"

            await second.stop()  # the replica dies; its endpoint is still listed
            burst = await asyncio.gather(*(client.chat.completions.create(
                model=MODEL_ID, messages=[{"role": "user", "content": f"{i}"}])
                for i in range(20)))
        assert len(burst) == 20  # none lost: the router moved them to the live replica
        assert len(first.served) >= 20
        await cluster.set_ready("gemma-1", False)  # the kubelet notices
        await cluster.upstreams("gemma", 1)


async def test_a_model_deleted_while_requests_wait_answers_them_404(
        router_connection: Connection, admin: Kube, namespace: str) -> None:
    async with routing(router_connection, admin, namespace) as cluster, \
            aiohttp.ClientSession() as http:
        await cluster.model("gemma", known=True)
        pending = [asyncio.create_task(http.post(f"{cluster.url}/v1/chat/completions",
                                                 json=CHAT)) for _ in range(3)]
        await cluster.held(f"{namespace}/gemma", 3)
        await admin.delete(API, "llmmodels", namespace, "gemma")
        answers = await asyncio.gather(*pending)
        assert [a.status for a in answers] == [404, 404, 404]
        body = await answers[0].json()
        assert body["error"]["code"] == "model_not_found"


async def test_client_keys_decide_who_reaches_which_model(
        router_connection: Connection, admin: Kube, namespace: str, tmp_path: Path) -> None:
    """With a keys file, a key reaches only the names its globs allow; nothing else waits."""
    team, other = "sk-llmop-team-a-key", "sk-llmop-other-key"
    keys = tmp_path / "keys.yaml"
    keys.write_text(yaml.safe_dump({"keys": [
        {"id": "team-a", "sha256": digest(team), "models": [f"{namespace}/alpha", "alpha"]},
        {"id": "other", "sha256": digest(other), "models": ["nothing-*"]}]}))
    async with routing(router_connection, admin, namespace,
                       clientKeys={"file": str(keys)}) as cluster, \
            aiohttp.ClientSession() as http:
        await cluster.model("alpha")
        await cluster.model("beta", known=True)
        await cluster.replica("alpha", 0)
        await cluster.upstreams("alpha", 1)
        url = f"{cluster.url}/v1/chat/completions"
        async with http.post(url, json={**CHAT, "model": "alpha"}) as r:
            assert r.status == 401
            assert (await r.json())["error"]["type"] == "invalid_request_error"
        async with http.post(url, json={**CHAT, "model": "beta"},
                             headers={"Authorization": f"Bearer {team}"}) as r:
            assert r.status == 403  # refused at once, not held for a replica
            assert "beta" in (await r.json())["error"]["message"]
        assert cluster.router.gateway.holds.held == {}
        async with http.post(url, json={**CHAT, "model": "gamma"},
                             headers={"Authorization": f"Bearer {other}"}) as r:
            assert r.status == 404
            assert (await r.json())["error"]["message"].endswith("available models: none")
        client = openai.AsyncOpenAI(base_url=f"{cluster.url}/v1", api_key=team,
                                    max_retries=0)
        async with client:
            # alpha's modelId is not the key's: its first name the key may use stands for it
            assert [m.id async for m in client.models.list()] == [f"{namespace}/alpha"]
            answer = await client.chat.completions.create(
                model=f"{namespace}/alpha", messages=[{"role": "user", "content": "hi"}])
        assert answer.choices[0].message.content == f"answered by {MODEL_ID}"


async def test_remote_and_failed_models(router_connection: Connection, admin: Kube,
                                        namespace: str) -> None:
    """A remote model goes to its gateway (status.endpoint); a Failed one says why."""
    async with routing(router_connection, admin, namespace) as cluster, \
            aiohttp.ClientSession() as http:
        proxy = FakeVllm("gpt-5.5")
        await proxy.start()
        cluster.replicas.append(proxy)
        remote = copy.deepcopy(sample_doc("gpt55-remote"))
        remote["metadata"]["namespace"] = namespace
        await admin.request("POST", f"/apis/{API}/namespaces/{namespace}/llmmodels",
                            body=remote)
        name = remote["metadata"]["name"]
        await admin.merge_patch(API, "llmmodels", namespace, name, subresource="status",
                                body={"status": {"phase": "Proxying",
                                                 "endpoint": f"{proxy.url}/v1"}})
        await cluster.model("broken")
        await cluster.not_ready("broken", "Failed", "ChecksumMismatch",
                                "the file's SHA-256 is not modelSource.sha256")
        async with asyncio.timeout(30):
            while not (cluster.router.table.upstreams.get((namespace, name))
                       and "broken" in cluster.router.table.absent):
                cluster.router.rebuilt.clear()
                await cluster.router.rebuilt.wait()
        async with http.post(f"{cluster.url}/v1/chat/completions",
                             json={**CHAT, "model": "gpt-5.5"}) as r:
            assert r.status == 200 and proxy.served == ["gpt-5.5"]
        async with http.post(f"{cluster.url}/v1/chat/completions",
                             json={**CHAT, "model": "broken"}) as r:
            assert r.status == 404
            message = (await r.json())["error"]["message"]
        assert message.startswith(f"The model 'broken' is not served: model {namespace}/broken "
                                  "failed: Failed: the file's SHA-256 is not modelSource.sha256")


@pytest.mark.parametrize("stem", ["gemma4-31b-nvidia"])
def test_labels_used_by_the_router_are_the_services(stem: str) -> None:
    """The router finds slices by the Service's labels, which slices inherit."""
    model = parse_llmmodel(sample_doc(stem))
    assert service(model, "inference", None)["metadata"]["labels"][L.K8S_MANAGED_BY] == \
        L.MANAGED_BY_VALUE


async def test_the_console_asks_for_a_key_and_shows_it_the_models_it_may_use(
        router_connection: Connection, admin: Kube, namespace: str, tmp_path: Path) -> None:
    """The router's /ui/: a login form where the gateway has client keys; a key sees its
    models, with the state and reason the operator wrote."""
    team = "sk-llmop-team-console"
    keys = tmp_path / "keys.yaml"
    keys.write_text(yaml.safe_dump({"keys": [
        {"id": "team-a", "sha256": digest(team), "models": [f"{namespace}/alpha"]}]}))
    async with routing(router_connection, admin, namespace,
                       clientKeys={"file": str(keys)}) as cluster, \
            aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        # unsafe: aiohttp keeps no cookie of an IP address by default; browsers do
        await cluster.model("alpha", known=True)
        await cluster.model("beta", known=True)
        await cluster.not_ready("alpha", "Pending", "Unschedulable",
                                "0/1 nodes are available: 1 Insufficient nvidia.com/gpu")
        async with http.get(f"{cluster.url}/ui/models") as r:
            assert r.status == 401 and "This gateway asks for a client key" in await r.text()
            assert "team" not in str(r.cookies)
        async with http.post(f"{cluster.url}/ui/login", data={"key": "sk-llmop-wrong"},
                             allow_redirects=False) as r:
            assert r.status == 401 and "sk-llmop-wrong" not in await r.text()
        async with http.post(f"{cluster.url}/ui/login", data={"key": team},
                             allow_redirects=False) as r:
            assert r.status == 303 and r.headers["Location"] == "/ui/models"
            cookie = r.headers["Set-Cookie"]
            assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/ui" in cookie
        async with asyncio.timeout(30):  # the status patch, seen by the router's informer
            while True:
                async with http.get(f"{cluster.url}/ui/models") as r:
                    assert r.status == 200
                    page = await r.text()
                if "Unschedulable" in page:
                    break
                cluster.router.rebuilt.clear()
                await cluster.router.rebuilt.wait()
        assert f'data-model="{namespace}/alpha"' in page
        assert f'data-model="{namespace}/beta"' not in page  # not the key's
        assert "0/1 nodes are available: 1 Insufficient nvidia.com/gpu" in page
        async with http.get(f"{cluster.url}/ui/models/{namespace}/beta") as r:
            assert r.status == 404
        async with http.get(f"{cluster.url}/ui/playground") as r:
            assert f"curl -sN {cluster.url}/v1/chat/completions" in await r.text()
        async with http.get(f"{cluster.url}/ui/keys") as r:
            page = await r.text()
        assert "<code>team-a</code>" in page and team not in page  # its id, never the key
        async with http.post(f"{cluster.url}/ui/logout", allow_redirects=False) as r:
            assert r.status == 303
        async with http.get(f"{cluster.url}/ui/models") as r:
            assert r.status == 401


async def test_the_consoles_admin_writes_keys_to_the_secret_and_curl_feels_each_change(
        router_connection: Connection, admin: Kube, namespace: str, tmp_path: Path,
        apiserver: ControlPlane) -> None:
    """config/router-admin: signed in with the admin token, a key is created (written to
    the Secret the keys file is mounted from, under the router's own RBAC), used with
    curl, disabled and refused, and the router may write no other Secret."""
    apiserver.kubectl("apply", "-f", str(REPO / "config" / "router-admin" / "rbac.yaml"))
    apiserver.wait_allowed(ROUTER_USER, "patch", "secrets/llmop-router-keys",
                           namespace="llm-operator-system")
    team = "sk-llmop-team-admin-test"
    keys = tmp_path / "keys.yaml"
    keys.write_text(yaml.safe_dump({"keys": [{"id": "team-a", "sha256": digest(team)}]}))
    secret = ("llm-operator-system", "llmop-router-keys")
    await admin.delete("v1", "secrets", *secret)
    await admin.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {
        "name": secret[1], "namespace": secret[0]}, "stringData": {
        "keys.yaml": keys.read_text()}})
    token = "admin-token-for-the-router-test"

    try:
        async with routing(router_connection, admin, namespace, admin_token=token,
                           keys_secret=secret, clientKeys={"file": str(keys)}) as cluster, \
                aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}",
                                               "Origin": cluster.url}) as http:
            # the browser blocks: it runs beside the router's event loop, not in it
            key = await asyncio.to_thread(administer_keys, cluster.url, token)
            stored = await admin.get("v1", "secrets", *secret)
            assert stored is not None
            written = base64.b64decode(stored["data"]["keys.yaml"]).decode()
            assert key not in written
            assert [(k["id"], k.get("disabled", False), k.get("requestsPerMinute"))
                    for k in yaml.safe_load(written)["keys"]] == [
                ("team-a", False, None), ("ci", True, 600)]
            assert await asyncio.to_thread(curl_models, cluster.url, team) == "200"  # untouched
            async with http.post(f"{cluster.url}/ui/keys/ci/enable") as r:
                assert r.status == 200
            assert await asyncio.to_thread(curl_models, cluster.url, key) == "200"
        async with Kube(router_connection) as kube:
            with pytest.raises(KeyringError, match="its Role needs get and patch"):
                await SecretKeyStore(kube, "llm-operator-system", "another").read()
    finally:
        await admin.delete("v1", "secrets", *secret)
