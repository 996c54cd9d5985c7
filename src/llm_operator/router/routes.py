"""The router's table: every LLMModel and its ready endpoints as gateway routes (pure)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.gateway.settings.config import (
    Balancing,
    CircuitBreaker,
    HoldSettings,
    Retry,
    Route,
    Upstream,
)
from llm_operator.profiles.adapters import llamacpp_selection
from llm_operator.profiles.concurrency import replica_slots
from llm_operator.render.pool_engine import pool_object_name
from llm_operator.render.remote import owned_by

FAILED = "Failed"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"  # set on every EndpointSlice
PORT_NAME = "http"  # the port our Services name (engines serve on it)
HOLD_REASON = 1024  # the most of a waiting reason a held request's keepalives say


@dataclass(frozen=True)
class Options:
    """How requests wait for a model with no replica, and how its replicas are called.

    ``retry`` and ``circuit_breaker`` (None: the gateway's defaults) go on every route whose
    upstreams the caller found (the router's pods, `llmop up`'s processes); by default a
    replica that refuses (restarting, overloaded) hands over to the next at once.
    ``stream_all`` streams every local model's answers from its engine (`llmop up`: all
    are llama-servers); otherwise only llama.cpp's are. A llama.cpp adapter goes to the
    base model with its ``lora`` id (llama-server's way), an SGLang one with ``lora_path``
    set to its name (SGLang's).
    """

    hold_seconds: float = 300.0
    keepalive_seconds: float = 5.0
    retry: Retry = field(default_factory=lambda: Retry(attempts=3,
                                                       backoff_initial_seconds=0.05))
    circuit_breaker: CircuitBreaker | None = None
    stream_all: bool = False


@dataclass(frozen=True)
class Serving:
    """Where one model's requests go: the same table for a cluster and for one machine.

    ``upstreams`` are its replicas (empty: requests are held, saying ``waiting``);
    ``absent`` says why it is not served at all (its requests get a 404 saying so);
    ``route`` replaces the replica fields and upstreams with fields of its own (a remote
    model `llmop up` proxies: its provider, key, limits and prices); its names are always
    the table's.
    """

    upstreams: Sequence[Upstream] = ()
    waiting: str = "Pending"
    absent: str | None = None
    route: Route | None = None
    # the sleep group its one upstream takes turns in (a pool's member under llmop up)
    sleep: Mapping[str, Any] | None = None


@dataclass
class Table:
    """Routes for the gateway, models known but not served, and each model's route labels."""

    routes: list[Route] = field(default_factory=list)
    absent: dict[str, str] = field(default_factory=dict)  # model name -> why not served
    labels: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    upstreams: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # base URLs
    # the names clients reach each model by (another model may have taken some first)
    names: dict[tuple[str, str], list[str]] = field(default_factory=dict)


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


def service_of(model: LLMModel) -> str:
    """The Service whose endpoints serve the model: its own, or its pool's."""
    pool = model.spec.pool
    return pool_object_name(pool.name) if pool is not None and not model.spec.is_remote \
        else model.name


def in_cluster(model: LLMModel, slices: Sequence[Mapping[str, Any]]) -> Serving:
    """Where the router sends a model's requests, from its status and its Service's slices.

    Local models go to their ready endpoints; remote ones to their gateway
    (status.endpoint) once Proxying; a Failed model is absent, with its reason.
    """
    reason = _waiting_reason(model)
    phase = model.status.phase if model.status else None
    if phase == FAILED:
        return Serving(absent=f"model {model.namespace}/{model.name} failed: {reason}")
    if model.spec.is_remote:
        endpoint = model.status.endpoint if model.status else None
        return Serving([Upstream(name=model.name, base_url=endpoint, auth="none")]
                       if endpoint and phase == "Proxying" else [], reason)
    return Serving([Upstream(name=name, base_url=url, auth="none")
                    for name, url in ready_endpoints(slices)], reason)


def _balancing(model: LLMModel) -> Balancing:
    routing = model.spec.routing
    if model.spec.is_remote:
        return Balancing(strategy="weighted")
    if model.spec.pool is not None:  # to the pool's replica that has it loaded
        return Balancing(strategy="model-hash")
    if routing is None or routing.strategy == "least-load":
        return Balancing(strategy="least-load")
    bounds: dict[str, Any] = {}
    if routing.prefix_chars:
        bounds["prefix_chars"] = routing.prefix_chars
    if routing.load_bound_percent:
        bounds["load_bound"] = routing.load_bound_percent / 100
    return Balancing(strategy=routing.strategy, **bounds)


def _served_names(model: LLMModel) -> list[str]:
    """The names a model claims first: its modelId and its LoRA adapters' (local only)."""
    if model.spec.is_remote:
        return [model.spec.model_id]
    return [model.spec.model_id, *(a.name for a in model.spec.lora_adapters or ())]


def _claim(models: Sequence[tuple[LLMModel, Serving]]) -> dict[str, tuple[str, str]]:
    """Which model each name goes to.

    First every modelId and adapter name, then every ``namespace/name``, then every
    ``metadata.name``; within each round, in the models' order.
    """
    owner: dict[str, tuple[str, str]] = {}
    rounds: list[Callable[[LLMModel], list[str]]] = [
        _served_names, lambda m: [f"{m.namespace}/{m.name}"], lambda m: [m.name]]
    for names_of in rounds:
        for model, _ in models:
            for name in names_of(model):
                owner.setdefault(name, (model.namespace, model.name))
    return owner


def build(models: Iterable[tuple[LLMModel, Serving]], options: Options | None = None
          ) -> Table:
    """Routes for every model, in namespace/name order.

    A model answers to its modelId, ``namespace/name`` and its name, unless another model
    took them first (a modelId wins over another model's alias); the first is the one
    /v1/models lists, the others are aliases. Upstreams get the modelId whatever name the
    client used. LoRA adapters answer to their names. Without an upstream a route holds
    requests until one appears; an absent model's names answer 404 with the reason.
    """
    options = options or Options()
    table = Table()
    ordered = sorted(models, key=lambda pair: (pair[0].namespace, pair[0].name))
    owner = _claim(ordered)
    for model, serving in ordered:
        key = (model.namespace, model.name)
        label = f"{model.namespace}/{model.name}"
        spec = model.spec
        names = [n for n in dict.fromkeys((spec.model_id, label, model.name))
                 if owner.get(n) == key]
        table.names[key] = names
        if serving.absent is not None:
            for name in names:
                table.absent[name] = serving.absent
            continue
        # the engine (or the model's gateway) knows it by its modelId alone; flow control
        # queues what its replicas' slots cannot take
        slots = replica_slots(spec)
        upstreams = [u.model_copy(update={"model": spec.model_id, **(
            {"slots": slots} if slots and u.slots is None else {})}) for u in serving.upstreams]
        fields: dict[str, Any] = {
            "name": label, "models": names[:1], "aliases": names[1:],
            "balancing": _balancing(model),
            "hold": HoldSettings(seconds=options.hold_seconds,
                                 reason=serving.waiting[:HOLD_REASON],
                                 keepalive_seconds=options.keepalive_seconds),
            "owned_by": owned_by(model) or "llmop",
            # checked here, for the model and its adapters
            **({"guardrails": spec.guardrails} if spec.guardrails is not None else {})}
        local = spec.inference_engine == "llamacpp" and not spec.is_remote
        route = Route(upstreams=upstreams, retry=options.retry, **fields, **(
            {"circuit_breaker": options.circuit_breaker} if options.circuit_breaker else {}), **(
            # llama-server stops generating for a client that left only when it streams
            {"stream_upstream": True} if local or (options.stream_all and not spec.is_remote)
            else {}), **(
            {"sleep": dict(serving.sleep)} if serving.sleep and len(upstreams) == 1 else {}),
            **(
            # every adapter at scale 0 unless the client says otherwise: llama-server reuses
            # a slot's prompt cache computed with an adapter for a request that names none
            {"default_fields": {"lora": llamacpp_selection(spec, None)}}
            if local and spec.lora_adapters else {})
        ) if serving.route is None else serving.route.model_copy(update=fields)
        table.routes.append(route)
        table.labels[key] = [label]
        table.upstreams[key] = [u.base_url for u in upstreams]
        for adapter in spec.lora_adapters or ():
            if owner.get(adapter.name) != key or spec.is_remote:
                continue
            mine: dict[str, Any] = {
                "name": f"{label}/{adapter.name}", "pool": label, "models": [adapter.name],
                "aliases": [], "upstreams": [u.model_copy(update={"model": adapter.name})
                                             for u in upstreams]}
            if spec.inference_engine == "llamacpp":  # the base model, the adapter's id
                mine.update(upstreams=upstreams,
                            set_fields={"lora": llamacpp_selection(spec, adapter.name)})
            elif spec.inference_engine == "sglang":  # the base model, SGLang's lora_path
                mine.update(upstreams=upstreams, set_fields={"lora_path": adapter.name})
            table.routes.append(route.model_copy(update=mine))
            table.labels[key].append(mine["name"])
    return table
