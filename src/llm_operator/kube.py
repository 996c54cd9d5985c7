"""A small async Kubernetes client: server-side apply, list, watch, patch (operator and MCP)."""

from __future__ import annotations

import asyncio
import base64
import builtins
import hashlib
import json
import os
import random
import ssl
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import aiohttp
import yaml

from llm_operator.connectors import tcp_connector

FIELD_MANAGER = "llm-operator"
SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")

# apiVersion/kind -> plural, for every kind the operator reads or writes.
PLURALS: MappingProxyType[tuple[str, str], str] = MappingProxyType({
    ("v1", "ConfigMap"): "configmaps",
    ("v1", "Event"): "events",
    ("v1", "PersistentVolumeClaim"): "persistentvolumeclaims",
    ("v1", "Pod"): "pods",
    ("v1", "Secret"): "secrets",
    ("v1", "Service"): "services",
    ("apps/v1", "Deployment"): "deployments",
    ("apps/v1", "DaemonSet"): "daemonsets",
    ("v1", "Pod/prefetch"): "pods",  # pods labelled prefetch-for (operator/caches.py)
    ("policy/v1", "PodDisruptionBudget"): "poddisruptionbudgets",
    ("scheduling.k8s.io/v1", "PriorityClass"): "priorityclasses",
    ("keda.sh/v1alpha1", "ScaledObject"): "scaledobjects",
    ("http.keda.sh/v1alpha1", "HTTPScaledObject"): "httpscaledobjects",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitors",
    ("monitoring.coreos.com/v1", "PodMonitor"): "podmonitors",
    ("networking.k8s.io/v1", "NetworkPolicy"): "networkpolicies",
    ("inference.networking.k8s.io/v1", "InferencePool"): "inferencepools",
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): "httproutes",
    ("ai.example.io/v1alpha1", "LLMModel"): "llmmodels",
    ("coordination.k8s.io/v1", "Lease"): "leases",
    ("v1", "ServiceAccount"): "serviceaccounts",
    ("rbac.authorization.k8s.io/v1", "Role"): "roles",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "rolebindings",
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): "leaderworkersets",
    ("disaggregatedset.x-k8s.io/v1", "DisaggregatedSet"): "disaggregatedsets",
    ("resource.k8s.io/v1", "ResourceClaimTemplate"): "resourceclaimtemplates",
    ("resource.k8s.io/v1", "ResourceSlice"): "resourceslices",
})
RETRYABLE = frozenset({429, 500, 502, 503, 504})


class ApiError(RuntimeError):
    """A Kubernetes API error; the message is the API's own Status message.

    ``causes`` are the reasons of the Status's ``details.causes`` (e.g. NamespaceTerminating).
    """

    def __init__(self, status: int, reason: str, message: str,
                 causes: tuple[str, ...] = ()) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message
        self.causes = causes

    @property
    def namespace_terminating(self) -> bool:
        """A write refused because its namespace is being deleted (403)."""
        return self.status == 403 and "NamespaceTerminating" in self.causes


def _api_error(status: int, reason: str | None, payload: Any) -> ApiError:
    """The error for a failed request, from the API's Status object when there is one."""
    info = payload if isinstance(payload, dict) else {}
    message = info.get("message", payload if isinstance(payload, str) else "")
    details = info.get("details")
    listed = details.get("causes") if isinstance(details, dict) else None
    causes = tuple(str(c["reason"]) for c in listed or ()
                   if isinstance(c, dict) and c.get("reason"))
    return ApiError(status, str(info.get("reason", reason)), str(message).strip()[:500],
                    causes)


async def _payload(r: aiohttp.ClientResponse) -> Any:
    """The JSON body, or the text of one that is not JSON (None when empty).

    The API server answers a group it does not serve at all (no KEDA installed) with a
    plain-text "404 page not found", not a Status object.
    """
    if r.content_length == 0:
        return None
    text = await r.text()
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        if r.status < 400:
            raise
        return text


@dataclass(frozen=True)
class Connection:
    """Where the API server is and how to authenticate (never logged)."""

    server: str
    token: str | None = None
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True

    def ssl_context(self) -> ssl.SSLContext | bool:
        if not self.server.startswith("https"):
            return False
        context = ssl.create_default_context(cafile=self.ca_file)
        if not self.verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.cert_file and self.key_file:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context


def _materialize(data: str | None, path: str | None, base: Path) -> str | None:
    """A file path for kubeconfig inline base64 data, or for a relative path.

    Inline data is written once per content (0600, named by its hash) and reused, so
    repeated loads do not leave a new temporary file each time.
    """
    if data:
        raw = base64.b64decode(data)
        target = Path(tempfile.gettempdir()) / \
            f"llmop-kube-{os.getuid()}-{hashlib.sha256(raw).hexdigest()[:24]}"
        if not target.exists():
            fd, name = tempfile.mkstemp(prefix="llmop-kube-", dir=target.parent)
            with os.fdopen(fd, "wb") as out:
                out.write(raw)
            os.replace(name, target)
        return str(target)
    if path:
        return str((base / path).resolve())
    return None


def from_kubeconfig(path: str | None = None) -> Connection:
    """The current context of a kubeconfig ($KUBECONFIG, else ~/.kube/config)."""
    file = Path(path or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
                or Path.home() / ".kube" / "config")
    config = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
    current = config.get("current-context")
    context = next((c["context"] for c in config.get("contexts", [])
                    if c.get("name") == current), None)
    if context is None:
        raise ValueError(f"{file}: current-context {current!r} is not defined")
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    user = next((u.get("user") or {} for u in config.get("users", [])
                 if u.get("name") == context.get("user")), {})
    if "exec" in user or "auth-provider" in user:
        raise ValueError(f"{file}: exec and auth-provider credentials are not supported; "
                         "use a token or client certificate (or run in-cluster)")
    base = file.parent
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = (base / user["tokenFile"]).read_text().strip()
    return Connection(
        server=cluster["server"].rstrip("/"), token=token,
        ca_file=_materialize(cluster.get("certificate-authority-data"),
                             cluster.get("certificate-authority"), base),
        cert_file=_materialize(user.get("client-certificate-data"),
                               user.get("client-certificate"), base),
        key_file=_materialize(user.get("client-key-data"), user.get("client-key"), base),
        verify=not cluster.get("insecure-skip-tls-verify", False),
    )


def in_cluster() -> Connection:
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
    return Connection(server=f"https://{host}:{port}",
                      token=(SA_DIR / "token").read_text().strip(),
                      ca_file=str(SA_DIR / "ca.crt"))


def connection() -> Connection:
    """In-cluster credentials inside a pod, the kubeconfig elsewhere."""
    return in_cluster() if os.environ.get("KUBERNETES_SERVICE_HOST") else from_kubeconfig()


def path_of(api_version: str, plural: str, namespace: str | None, name: str | None = None,
            subresource: str | None = None) -> str:
    root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    parts = [root, f"namespaces/{namespace}" if namespace else None, plural, name, subresource]
    return "/".join(p for p in parts if p)


def plural_of(obj: dict[str, Any]) -> str:
    try:
        return PLURALS[(obj["apiVersion"], obj["kind"])]
    except KeyError:
        raise ValueError(f"unknown kind {obj.get('apiVersion')}/{obj.get('kind')}") from None


class Kube:
    """Requests with bounded retries on 429/5xx and connection loss (jittered backoff)."""

    def __init__(self, conn: Connection, *, attempts: int = 5,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.conn = conn
        self.attempts = attempts
        self._sleep = sleep
        self._session: aiohttp.ClientSession | None = None
        self.writes = 0  # write requests sent (the operator's own metric and benchmarks)

    async def __aenter__(self) -> Kube:
        headers = {"Authorization": f"Bearer {self.conn.token}"} if self.conn.token else {}
        connector = tcp_connector(ssl=self.conn.ssl_context())
        self._session = aiohttp.ClientSession(self.conn.server, headers=headers,
                                              connector=connector,
                                              timeout=aiohttp.ClientTimeout(total=30))
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def request(self, method: str, path: str, *, body: Any = None,
                      content_type: str = "application/json",
                      params: dict[str, str] | None = None) -> Any:
        assert self._session is not None, "use `async with Kube(...)`"
        data = json.dumps(body) if body is not None else None
        if method != "GET":
            self.writes += 1
        for attempt in range(1, self.attempts + 1):
            try:
                async with self._session.request(method, path, data=data, params=params,
                                                 headers={"Content-Type": content_type}) as r:
                    payload = await _payload(r)
                    if r.status < 400:
                        return payload
                    if r.status not in RETRYABLE or attempt == self.attempts:
                        raise _api_error(r.status, r.reason, payload)
            except (aiohttp.ClientConnectionError, TimeoutError):
                if attempt == self.attempts:
                    raise
            await self._sleep(min(8.0, 0.2 * 2 ** (attempt - 1)) * (0.5 + random.random() / 2))
        raise AssertionError("unreachable")

    async def text(self, path: str, params: dict[str, str] | None = None) -> str:
        """A GET whose answer is text, not JSON (a pod's log); ApiError when refused."""
        assert self._session is not None, "use `async with Kube(...)`"
        async with self._session.get(path, params=params) as r:
            if r.status >= 400:
                raise _api_error(r.status, r.reason, await _payload(r))
            return await r.text(errors="replace")

    async def apply(self, obj: dict[str, Any], field_manager: str = FIELD_MANAGER
                    ) -> dict[str, Any]:
        """Server-side apply, by default with the operator's field manager.

        Forced: the operator owns the fields it renders on its children.
        """
        meta = obj["metadata"]
        path = path_of(obj["apiVersion"], plural_of(obj), meta.get("namespace"), meta["name"])
        result: dict[str, Any] = await self.request(
            "PATCH", path, body=obj, content_type="application/apply-patch+yaml",
            params={"fieldManager": field_manager, "force": "true"})
        return result

    async def _unless_missing(self, method: str, path: str,
                              params: dict[str, str] | None = None) -> Any:
        """The request's result, or None when the object does not exist (404)."""
        try:
            return await self.request(method, path, params=params)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def get(self, api_version: str, plural: str, namespace: str | None, name: str
                  ) -> dict[str, Any] | None:
        result: dict[str, Any] | None = await self._unless_missing(
            "GET", path_of(api_version, plural, namespace, name))
        return result

    async def list(self, api_version: str, plural: str, namespace: str | None,
                   label_selector: str | None = None) -> list[dict[str, Any]]:
        params = {"labelSelector": label_selector} if label_selector else None
        result = await self.request("GET", path_of(api_version, plural, namespace),
                                    params=params)
        items: list[dict[str, Any]] = result.get("items", [])
        return items

    async def list_versioned(self, api_version: str, plural: str, namespace: str | None,
                             label_selector: str | None = None
                             ) -> tuple[builtins.list[dict[str, Any]], str]:
        """Every object plus the list's resourceVersion (where a watch resumes)."""
        params = {"labelSelector": label_selector} if label_selector else None
        result = await self.request("GET", path_of(api_version, plural, namespace),
                                    params=params)
        return result.get("items", []), str(result.get("metadata", {}).get("resourceVersion", ""))

    async def watch(self, api_version: str, plural: str, namespace: str | None, *,
                    resource_version: str, timeout_seconds: int = 300,
                    label_selector: str | None = None
                    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """(type, object) events after ``resource_version`` until the server ends the watch.

        A 410 Gone (resourceVersion too old) raises ApiError(410): relist, then watch again.
        BOOKMARK events are yielded too, so callers can advance their resourceVersion.
        """
        assert self._session is not None, "use `async with Kube(...)`"
        params = {"watch": "true", "resourceVersion": resource_version,
                  "allowWatchBookmarks": "true", "timeoutSeconds": str(timeout_seconds)}
        if label_selector:
            params["labelSelector"] = label_selector
        async with self._session.get(path_of(api_version, plural, namespace), params=params,
                                     timeout=aiohttp.ClientTimeout(
                                         total=None, sock_read=timeout_seconds + 30)) as r:
            if r.status >= 400:
                raise _api_error(r.status, r.reason, await _payload(r))
            async for line in r.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    raise _api_error(int(obj.get("code", 500)), "", obj)
                yield str(event.get("type")), obj

    async def delete(self, api_version: str, plural: str, namespace: str | None,
                     name: str) -> bool:
        """Delete; False when it was already gone."""
        result = await self._unless_missing("DELETE", path_of(api_version, plural, namespace, name),
                                            params={"propagationPolicy": "Background"})
        return result is not None

    async def merge_patch(self, api_version: str, plural: str, namespace: str | None,
                          name: str, *, body: dict[str, Any], subresource: str | None = None
                          ) -> dict[str, Any]:
        result: dict[str, Any] = await self.request(
            "PATCH", path_of(api_version, plural, namespace, name, subresource), body=body,
            content_type="application/merge-patch+json")
        return result
