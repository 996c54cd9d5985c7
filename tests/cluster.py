"""kmock's Kubernetes emulator with the API semantics the operator's tests rely on.

kmock 0.8 stores objects as merged dicts (see ../shared/kmock-notes.md). ``Cluster`` keeps
kmock's HTTP layer, request log and discovery, and serves resource requests from its own
store with Kubernetes semantics:

- uid, creationTimestamp, a cluster-wide resourceVersion, and generation (bumped only by
  spec changes); 201 on create; 409 on a name clash or a stale ``metadata.resourceVersion``;
- the status subresource: the main resource ignores ``status``, ``/status`` changes only it;
- JSON merge, strategic merge (as merge) and JSON patches, PUT, and server-side apply
  (``application/apply-patch+yaml``): creates, merges, and removes the fields a field
  manager applied before and no longer applies; records the applier in ``managedFields``
  (simplified: every list is atomic);
- no-op writes change nothing: no new resourceVersion, no watch event;
- label selectors on list and watch; watch resumes after a ``resourceVersion``;
- finalizers (deletionTimestamp first), and garbage collection of owned objects;
- injected faults: ``cluster.fail(action, plural, status, times)``.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import json
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp.web
import attrs
import jsonpatch
import kmock
import yaml
from kmock._internal import enums

Key = tuple[str, str | None, str]  # (group/version/plural, namespace, name)

# What the operator reads and writes: (api, plural, kind, has a status subresource).
OPERATOR_KINDS = (
    ("v1", "persistentvolumeclaims", "PersistentVolumeClaim", False),
    ("v1", "configmaps", "ConfigMap", False), ("v1", "services", "Service", False),
    ("v1", "secrets", "Secret", False), ("v1", "pods", "Pod", True),
    ("v1", "events", "Event", False), ("v1", "namespaces", "Namespace", False),
    ("apps/v1", "deployments", "Deployment", True),
    ("apiextensions.k8s.io/v1", "customresourcedefinitions", "CustomResourceDefinition", False),
    ("keda.sh/v1alpha1", "scaledobjects", "ScaledObject", True),
    ("http.keda.sh/v1alpha1", "httpscaledobjects", "HTTPScaledObject", True),
    ("monitoring.coreos.com/v1", "servicemonitors", "ServiceMonitor", False),
    ("networking.k8s.io/v1", "networkpolicies", "NetworkPolicy", False),
    ("ai.example.io/v1alpha1", "llmmodels", "LLMModel", True),
    ("coordination.k8s.io/v1", "leases", "Lease", False),
    ("scheduling.k8s.io/v1", "priorityclasses", "PriorityClass", False),
    ("policy/v1", "poddisruptionbudgets", "PodDisruptionBudget", True),
)
CLUSTER_SCOPED = frozenset({"namespaces", "customresourcedefinitions", "priorityclasses"})
PRIORITY_CLASSES = Path(__file__).parents[1] / "config" / "priority" / "priority-classes.yaml"


@dataclass
class Fault:
    action: str
    plural: str
    status: int
    times: int


def now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge(base: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (null removes)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(base) if isinstance(base, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


def leaf_paths(node: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from leaf_paths(value, (*prefix, key))
    else:
        yield prefix


def drop_path(node: dict[str, Any], path: tuple[str, ...]) -> None:
    for key in path[:-1]:
        node = node.get(key)  # type: ignore[assignment]
        if not isinstance(node, dict):
            return
    node.pop(path[-1], None)


# --- label selectors ------------------------------------------------------------------------

SELECTOR = re.compile(
    r"\s*(?:(?P<not>!)(?P<nkey>[\w./-]+)|(?P<key>[\w./-]+)\s*(?:(?P<op>==|!=|=)\s*(?P<val>[\w./-]*)"
    r"|\s+(?P<setop>in|notin)\s*\((?P<vals>[^)]*)\))?)\s*(?:,|$)")


def fields_v1(node: Any, path: tuple[str, ...] = ()) -> dict[str, Any]:
    """A simplified managedFields ``fieldsV1`` of an applied object: every list is atomic."""
    if not isinstance(node, dict):
        return {}
    skip = {(): {"apiVersion", "kind"}, ("metadata",): {"name", "namespace"}}.get(path, set())
    return {f"f:{k}": fields_v1(v, (*path, k)) for k, v in node.items() if k not in skip}


def with_owner(obj: dict[str, Any], manager: str, body: dict[str, Any]) -> None:
    """Record ``manager`` as the Apply owner of ``body``'s fields in ``obj``."""
    meta = obj.setdefault("metadata", {})
    entries = [e for e in meta.get("managedFields") or [] if e.get("manager") != manager]
    meta["managedFields"] = [*entries, {"manager": manager, "operation": "Apply",
                                        "apiVersion": body.get("apiVersion"),
                                        "fieldsType": "FieldsV1", "fieldsV1": fields_v1(body)}]


def selector_matches(selector: str | None, labels: dict[str, str]) -> bool:
    if not selector:
        return True
    for m in SELECTOR.finditer(selector):
        if not m.group(0).strip(", "):
            continue
        if m.group("not"):
            if m.group("nkey") in labels:
                return False
            continue
        key, value = m.group("key"), labels.get(m.group("key"))
        if m.group("op") in {"=", "=="} and value != m.group("val"):
            return False
        if m.group("op") == "!=" and value == m.group("val"):
            return False
        if m.group("setop"):
            options = {v.strip() for v in m.group("vals").split(",")}
            if (m.group("setop") == "in") != (value in options):
                return False
        if not m.group("op") and not m.group("setop") and key not in labels:
            return False
    return True


# --- the emulator ---------------------------------------------------------------------------

@attrs.define(kw_only=True)
class Cluster(kmock.KubernetesEmulator):
    store: dict[Key, dict[str, Any]] = attrs.field(factory=dict, init=False)
    revision: int = attrs.field(default=0, init=False)
    _events: list[tuple[int, str, str, dict[str, Any]]] = attrs.field(factory=list, init=False)
    _watchers: list[tuple[str, asyncio.Queue[tuple[int, str, dict[str, Any]]]]] = attrs.field(
        factory=list, init=False)
    _applied: dict[tuple[Key, str], dict[str, Any]] = attrs.field(factory=dict, init=False)
    _faults: list[Fault] = attrs.field(factory=list, init=False)
    _kinds: dict[str, tuple[str, bool, bool]] = attrs.field(factory=dict, init=False)
    _changed: asyncio.Event = attrs.field(factory=asyncio.Event, init=False)

    # --- setup and inspection ---

    def register(self, api: str, plural: str, kind: str, *, namespaced: bool = True,
                 status: bool = False) -> None:
        """Declare a resource; ``api`` is "v1" or "group/version"."""
        group, _, version = api.rpartition("/")
        self.resources[kmock.resource(group, version, plural)] = kmock.ResourceInfo(
            kind=kind, singular=kind.lower(), namespaced=namespaced,
            verbs={"list", "watch", "get", "create", "update", "patch", "delete"},
            subresources={"status"} if status else set())
        self._kinds[f"{api}/{plural}"] = (kind, namespaced, status)

    def register_operator_kinds(self) -> None:
        """The kinds, and the PriorityClasses config/default installs (models' pods name one)."""
        for api, plural, kind, status in OPERATOR_KINDS:
            self.register(api, plural, kind, namespaced=plural not in CLUSTER_SCOPED,
                          status=status)
        for doc in yaml.safe_load_all(PRIORITY_CLASSES.read_text(encoding="utf-8")):
            self._create("scheduling.k8s.io/v1/priorityclasses", None, doc)

    def fail(self, action: str, plural: str, status: int, times: int = 1) -> None:
        """The next ``times`` requests of ``action`` on ``plural`` answer ``status``."""
        self._faults.append(Fault(action, plural, status, times))

    def objects_of(self, api: str, plural: str, namespace: str | None = None
                   ) -> list[dict[str, Any]]:
        rid = f"{api}/{plural}"
        return [o for (r, ns, _), o in sorted(self.store.items(), key=lambda kv: kv[0][2])
                if r == rid and (namespace is None or ns == namespace)]

    def get(self, api: str, plural: str, namespace: str | None, name: str
            ) -> dict[str, Any] | None:
        return self.store.get((f"{api}/{plural}", namespace, name))

    def drop_watches(self) -> None:
        """End every open watch stream (clients must reconnect and resume)."""
        for _, queue in self._watchers:
            queue.put_nowait((-1, "", {}))

    async def until(self, check: Callable[[], bool], timeout: float = 10) -> None:
        """Wait until ``check()`` holds; re-checked after every request and change."""
        async with asyncio.timeout(timeout):
            while not check():
                self._changed.clear()
                await self._changed.wait()

    # --- request dispatch ---

    async def _handle(self, request: Any) -> aiohttp.web.StreamResponse:
        self._changed.set()  # every request may be what a waiter looks for
        res = request.resource
        action = request.action
        if action is None and request.method == enums.method.PUT and request.name:
            action = enums.action.UPDATE
        if res is None or action is None or not res.plural:  # discovery: kmock's own
            return await super()._handle(request)
        rid = f"{res.group}/{res.version}/{res.plural}" if res.group else \
            f"{res.version}/{res.plural}"
        if rid not in self._kinds:
            raise kmock.KubernetesResourceNotFoundError()
        self._maybe_fail(action, res.plural)
        if action == enums.action.WATCH:
            return await self._watch(request, rid)
        async with self._lock:
            if action == enums.action.LIST:
                return aiohttp.web.json_response(self._list(request, rid))
            if action == enums.action.FETCH:
                return aiohttp.web.json_response(self._fetch(request, rid))
            if action == enums.action.CREATE:
                return aiohttp.web.json_response(self._create(rid, request.namespace,
                                                              self._body(request)), status=201)
            if action == enums.action.UPDATE:
                return aiohttp.web.json_response(self._update(request, rid, action))
            if action == enums.action.DELETE:
                return aiohttp.web.json_response(self._delete(rid, request.namespace,
                                                              request.name))
        return await super()._handle(request)

    def _maybe_fail(self, action: Any, plural: str) -> None:
        for fault in self._faults:
            if fault.times > 0 and fault.plural == plural and fault.action.upper() == action.value:
                fault.times -= 1
                raise kmock.KubernetesError(status=fault.status, reason="Injected",
                                            message=f"injected {fault.status}")

    @staticmethod
    def _body(request: Any) -> Any:
        ctype = request.headers.get("Content-Type", "")
        if "yaml" in ctype:
            return yaml.safe_load(request.body or b"{}")
        return json.loads(request.body or b"{}")

    # --- reads ---

    def _list(self, request: Any, rid: str) -> dict[str, Any]:
        kind = self._kinds[rid][0]
        selector = request.params.get("labelSelector")
        items = [o for (r, ns, _), o in self.store.items() if r == rid
                 and (request.namespace is None or ns == request.namespace)
                 and selector_matches(selector, o["metadata"].get("labels") or {})]
        api = rid.rsplit("/", 1)[0]
        return {"apiVersion": api, "kind": f"{kind}List",
                "metadata": {"resourceVersion": str(self.revision)},
                "items": sorted(items, key=lambda o: (o["metadata"].get("namespace") or "",
                                                      o["metadata"]["name"]))}

    def _fetch(self, request: Any, rid: str) -> dict[str, Any]:
        obj = self.store.get((rid, request.namespace, request.name))
        if obj is None:
            raise kmock.KubernetesObjectNotFoundError()
        return obj

    async def _watch(self, request: Any, rid: str) -> aiohttp.web.StreamResponse:
        selector = request.params.get("labelSelector")
        since = request.params.get("resourceVersion")
        timeout = float(request.params.get("timeoutSeconds") or 3600)

        def visible(obj: dict[str, Any]) -> bool:
            ns = obj["metadata"].get("namespace")
            return (request.namespace is None or ns == request.namespace) and \
                selector_matches(selector, obj["metadata"].get("labels") or {})

        queue: asyncio.Queue[tuple[int, str, dict[str, Any]]] = asyncio.Queue()
        async with self._lock:
            if since and since != "0":
                backlog = [(rv, t, o) for rv, r, t, o in self._events
                           if r == rid and rv > int(since)]
            else:
                backlog = [(self.revision, "ADDED", o) for (r, _, _), o in self.store.items()
                           if r == rid]
            self._watchers.append((rid, queue))
        raw = request._raw_request  # kmock keeps the aiohttp request for streaming
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(raw)
        try:
            for _, kind, obj in backlog:
                if visible(obj):
                    await response.write(json.dumps({"type": kind, "object": obj}).encode()
                                         + b"\n")
            deadline = asyncio.get_running_loop().time() + timeout
            while True:
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    break
                try:
                    revision, kind, obj = await asyncio.wait_for(queue.get(), remaining)
                except TimeoutError:
                    break
                if revision < 0:  # drop_watches(): end the stream as a server restart would
                    break
                if visible(obj):
                    await response.write(json.dumps({"type": kind, "object": obj}).encode()
                                         + b"\n")
        except (ConnectionResetError, aiohttp.ClientConnectionResetError):
            pass
        finally:
            self._watchers[:] = [w for w in self._watchers if w[1] is not queue]
        return response

    # --- writes ---

    def _emit(self, rid: str, kind: str, obj: dict[str, Any]) -> None:
        snapshot = copy.deepcopy(obj)
        self._events.append((self.revision, rid, kind, snapshot))
        self._changed.set()
        for wrid, queue in self._watchers:
            if wrid == rid:
                queue.put_nowait((self.revision, kind, snapshot))

    def _commit(self, rid: str, key: Key, old: dict[str, Any] | None, new: dict[str, Any]
                ) -> dict[str, Any]:
        """Store ``new`` if it differs from ``old``: new resourceVersion, generation, event."""
        if old is not None and new == old:
            return old
        self.revision += 1
        meta = new["metadata"]
        meta["resourceVersion"] = str(self.revision)
        if old is not None:
            spec_old = {k: v for k, v in old.items() if k not in {"metadata", "status"}}
            spec_new = {k: v for k, v in new.items() if k not in {"metadata", "status"}}
            meta["generation"] = old["metadata"].get("generation", 1) + (spec_old != spec_new)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self.store.pop(key, None)
            self._emit(rid, "DELETED", new)
            self._collect_garbage(meta["uid"])
            return new
        self.store[key] = new
        self._emit(rid, "ADDED" if old is None else "MODIFIED", new)
        return new

    def _create(self, rid: str, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]:
        meta = dict(body.get("metadata") or {})
        name = meta.get("name") or f"{meta.get('generateName', 'obj-')}{uuid.uuid4().hex[:5]}"
        namespace = namespace or meta.get("namespace")
        key = (rid, namespace if self._kinds[rid][1] else None, name)
        if key in self.store:
            raise kmock.KubernetesError(status=409, reason="AlreadyExists",
                                        message=f"{self._kinds[rid][0]} {name!r} already exists")
        meta.update(name=name, uid=str(uuid.uuid4()), creationTimestamp=now(), generation=1)
        if self._kinds[rid][1]:
            meta["namespace"] = namespace
        obj = {**copy.deepcopy(body), "metadata": meta}
        if self._kinds[rid][2]:
            obj.pop("status", None)
        kind, api = self._kinds[rid][0], rid.rsplit("/", 1)[0]
        obj.setdefault("apiVersion", api)
        obj.setdefault("kind", kind)
        return self._commit(rid, key, None, obj)

    def _update(self, request: Any, rid: str, action: Any) -> dict[str, Any]:
        key = (rid, request.namespace, request.name)
        old = self.store.get(key)
        ctype = request.headers.get("Content-Type", "")
        body = self._body(request)
        if old is None:
            if "apply-patch" not in ctype:
                raise kmock.KubernetesObjectNotFoundError()
            manager = request.params.get("fieldManager", "")
            applied = copy.deepcopy(body)
            with_owner(body, manager, applied)
            created = self._create(rid, request.namespace, body)
            self._applied[(key, manager)] = applied
            return created
        sent_rv = (body.get("metadata") or {}).get("resourceVersion") \
            if isinstance(body, dict) else None
        if sent_rv and sent_rv != old["metadata"]["resourceVersion"]:
            raise kmock.KubernetesError(
                status=409, reason="Conflict",
                message="the object has been modified; please apply your changes to the "
                        "latest version and try again")
        status_sub = request.subresource == "status"
        if "json-patch" in ctype:
            try:
                new = jsonpatch.apply_patch(old, body)
            except (jsonpatch.JsonPatchTestFailed, jsonpatch.JsonPatchConflict) as exc:
                # As the API server: a failed "test" (a guarded JSON patch) is 422.
                raise kmock.KubernetesError(status=422, reason="Invalid",
                                            message=str(exc)) from None
        elif "apply-patch" in ctype:
            manager = request.params.get("fieldManager", "")
            previous = self._applied.get((key, manager), {})
            new = merge(old, body)
            for path in set(leaf_paths(previous)) - set(leaf_paths(body)):
                drop_path(new, path)
            with_owner(new, manager, body)
            self._applied[(key, manager)] = copy.deepcopy(body)
        elif request.method == enums.method.PUT:
            new = copy.deepcopy(body)
        else:
            new = merge(old, body)
        server_owned = {k: old["metadata"][k] for k in
                        ("uid", "creationTimestamp", "generation", "deletionTimestamp",
                         "namespace", "name") if k in old["metadata"]}
        new["metadata"] = {**(new.get("metadata") or {}), **server_owned}
        if self._kinds[rid][2]:
            if status_sub:  # only the status changes
                new = {**copy.deepcopy(old), "status": new.get("status")}
                if new["status"] is None:
                    new.pop("status")
            elif "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            else:
                new.pop("status", None)
        new["metadata"].pop("resourceVersion", None)
        old_cmp = copy.deepcopy(old)
        old_cmp["metadata"].pop("resourceVersion", None)
        if new == old_cmp:
            return old
        return self._commit(rid, key, old, new)

    def _delete(self, rid: str, namespace: str | None, name: str | None) -> dict[str, Any]:
        key = (rid, namespace if self._kinds[rid][1] else None, name or "")
        old = self.store.get(key)
        if old is None:
            raise kmock.KubernetesObjectNotFoundError()
        if old["metadata"].get("deletionTimestamp"):
            return old
        new = copy.deepcopy(old)
        new["metadata"]["deletionTimestamp"] = now()
        return self._commit(rid, key, old, new)

    def _collect_garbage(self, owner_uid: str) -> None:
        for (rid, ns, name), obj in list(self.store.items()):
            owners = obj["metadata"].get("ownerReferences") or []
            if any(ref.get("uid") == owner_uid for ref in owners) and (rid, ns, name) in self.store:
                self._delete(rid, ns, name)


def allowed(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
               for r in rules)


def needed(cluster: Cluster) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) of every resource request the operator made."""
    out = set()
    for r in cluster:
        if r.resource is None or not r.resource.plural:
            continue
        resource = r.resource.plural + (f"/{r.subresource}" if r.subresource else "")
        method = r.method.value
        if method == "GET":
            verb = "watch" if r.params.get("watch") else "get" if r.name else "list"
        else:
            verb = {"POST": "create", "PATCH": "patch", "PUT": "update",
                    "DELETE": "delete"}[method]
        out.add((r.resource.group or "", resource, verb))
        if "apply-patch" in r.headers.get("Content-Type", ""):
            out.add((r.resource.group or "", resource, "create"))  # apply may create
    return out
