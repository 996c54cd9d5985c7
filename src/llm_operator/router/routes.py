"""The router's table: every LLMModel and its ready endpoints as gateway routes (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.profiles.adapters import llamacpp_selection
from llm_operator.render.remote import owned_by

FAILED = "Failed"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"  # set on every EndpointSlice
PORT_NAME = "http"  # the port our Services name (engines serve on it)


@dataclass(frozen=True)
class Options:
    """How long requests wait for a model with no replica, and how they are retried."""

    hold_seconds: float = 300.0
    keepalive_seconds: float = 5.0


@dataclass
class Table:
    """Routes for the gateway, models known but not served, and each model's route labels."""

    routes: list[dict[str, Any]] = field(default_factory=list)
    absent: dict[str, str] = field(default_factory=dict)  # model name -> why not served
    labels: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    upstreams: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # base URLs


def ready_endpoints(slices: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(name, base URL) of each ready, not terminating, endpoint on the ``http`` port.

    A condition left out counts as true, as the EndpointSlice API says. The name is the
    pod's (targetRef), else the address.
    """
    found: dict[str, str] = {}
    for piece in slices:
        port = next((p.get("port") for p in piece.get("ports") or ()
                     if p.get("name") == PORT_NAME), None)
        if not isinstance(port, int):
            continue
        for endpoint in piece.get("endpoints") or ():
            conditions = endpoint.get("conditions") or {}
            if conditions.get("ready") is False or conditions.get("terminating") is True:
                continue
            pod = (endpoint.get("targetRef") or {}).get("name")
            for address in endpoint.get("addresses") or ():
                host = f"[{address}]" if ":" in address else address
                found[f"http://{host}:{port}/v1"] = pod or address
    return sorted(((name, url) for url, name in found.items()), key=lambda e: e[1])


def _waiting_reason(model: LLMModel) -> str:
    status = model.status
    phase = (status.phase if status else None) or "Pending"
    ready = next((c for c in (status.conditions or []) if c.type == "Ready"), None) \
        if status else None
    if ready is not None and ready.status != "True" and ready.message:
        return f"{phase}: {ready.message}"[:300]
    return phase


def _balancing(model: LLMModel) -> dict[str, Any]:
    routing = model.spec.routing
    if model.spec.is_remote:
        return {"strategy": "weighted"}
    if routing is None or routing.strategy == "least-load":
        return {"strategy": "least-load"}
    out: dict[str, Any] = {"strategy": "prefix-hash"}
    if routing.prefix_chars:
        out["prefixChars"] = routing.prefix_chars
    if routing.load_bound_percent:
        out["loadBound"] = routing.load_bound_percent / 100
    return out


def build(models: Iterable[LLMModel],
          slices: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]],
          options: Options | None = None) -> Table:
    """Routes for every model, in namespace/name order.

    A model answers to its modelId and its name where no earlier model took them, and
    always to ``namespace/name``; its LoRA adapters to their names (vLLM serves them by
    name; llama-server gets the base model and the adapter's id in ``lora``). Local models
    route to their Service's ready endpoints (``slices`` by namespace and Service name);
    remote ones to their gateway (status.endpoint). Without an endpoint a route holds
    requests until one appears; a Failed model is absent, with its reason.
    """
    options = options or Options()
    table = Table()
    taken: set[str] = set()
    for model in sorted(models, key=lambda m: (m.namespace, m.name)):
        key = (model.namespace, model.name)
        label = f"{model.namespace}/{model.name}"
        spec = model.spec
        names = [n for n in dict.fromkeys((spec.model_id, model.name, label))
                 if n not in taken]
        taken.update(names)
        phase = model.status.phase if model.status else None
        if phase == FAILED:
            for name in names:
                table.absent[name] = f"model {label} failed: {_waiting_reason(model)}"
            continue
        if spec.is_remote:
            endpoint = model.status.endpoint if model.status else None
            upstreams = [{"name": model.name, "baseUrl": endpoint, "auth": "none"}] \
                if endpoint and phase == "Proxying" else []
        else:
            upstreams = [{"name": name, "baseUrl": url, "auth": "none"}
                         for name, url in ready_endpoints(slices.get(key, []))]
        route: dict[str, Any] = {
            "name": label, "models": names, "upstreams": upstreams,
            "balancing": _balancing(model),
            "hold": {"seconds": options.hold_seconds, "reason": _waiting_reason(model),
                     "keepaliveSeconds": options.keepalive_seconds},
            # a replica that refuses (restarting, overloaded) hands over to the next at once
            "retry": {"attempts": 3, "backoffInitialSeconds": 0.05},
        }
        if (vendor := owned_by(model)) is not None:
            route["ownedBy"] = vendor
        table.routes.append(route)
        table.labels[key] = [label]
        table.upstreams[key] = [u["baseUrl"] for u in upstreams]
        for adapter in spec.lora_adapters or ():
            if adapter.name in taken or spec.is_remote:
                continue
            taken.add(adapter.name)
            adapter_route = {**route, "name": f"{label}/{adapter.name}",
                             "models": [adapter.name]}
            if spec.inference_engine == "llamacpp":  # the base model, the adapter by its id
                adapter_route["upstreams"] = [{**u, "model": spec.model_id}
                                              for u in upstreams]
                adapter_route["setFields"] = {"lora": llamacpp_selection(spec, adapter.name)}
            table.routes.append(adapter_route)
            table.labels[key].append(adapter_route["name"])
    return table
