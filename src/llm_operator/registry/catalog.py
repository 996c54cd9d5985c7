"""The MCP tool catalog: models from several sources merged by precedence into callable tools."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import urlsplit

from llm_operator.api import labels as L
from llm_operator.api.formats import MCP_TOOL_NAME
from llm_operator.api.guardrails import GuardrailsSpec
from llm_operator.api.lora import LoraAdapterSpec
from llm_operator.api.references import names_of
from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.profiles.adapters import llamacpp_selection
from llm_operator.registry.query import SERVING_PHASES, Facets, Query, accepts, facets, summary

Source = Literal["kubernetes", "files", "admin"]
# Earlier wins when two sources publish the same tool name (docs/mcp.md, "Registry").
PRECEDENCE: tuple[Source, ...] = ("kubernetes", "files", "admin")

# How a model is asked to think: a chat-template switch (Qwen3.x, GLM, DeepSeek), the
# provider's reasoning parameter (OpenAI, Gemini), Anthropic's thinking block, or the guide's
# system-prompt instruction for everything else.
ThinkingStyle = Literal["enable_thinking", "deepseek", "reasoning_effort", "anthropic",
                        "system_prompt"]


@dataclass(frozen=True)
class ToolRecord:
    """One model as an MCP tool: what agents see and where calls go."""

    tool_name: str
    description: str
    model_id: str
    endpoint: str | None
    source: Source
    key: str  # unique within its source: "namespace/name", a file path or the tool name
    facets: Facets
    remote: bool
    thinking_style: ThinkingStyle
    info: dict[str, Any] = field(hash=False)  # list_available_models' entry
    base_model: bool = False  # asked with a Q/A transcript on /completions
    # Body fields a call sets over the defaults: a llama.cpp adapter is asked for by id
    # on the base model (llama-server's per-request `lora`).
    request: dict[str, Any] = field(default_factory=dict, hash=False)
    # The model's guardrails: a call passes them as a request through the router would.
    guardrails: GuardrailsSpec | None = field(default=None, hash=False)

    @property
    def path(self) -> str:
        """Where a call goes under the endpoint's OpenAI base URL."""
        return "completions" if self.base_model else "chat/completions"

    @property
    def callable(self) -> bool:
        return bool(self.endpoint) and self.facets.phase in SERVING_PHASES


def thinking_style(model: LLMModel) -> ThinkingStyle:
    spec = model.spec
    if spec.is_remote and spec.remote_api is not None:
        host = urlsplit(spec.remote_api.base_url).hostname or ""
        if host.endswith("anthropic.com"):
            return "anthropic"
        if host.endswith(("openai.com", "googleapis.com")):
            return "reasoning_effort"
        return "system_prompt"
    model_id = spec.model_id.lower()
    if "deepseek" in model_id:
        return "deepseek"
    if re.search(r"qwen3|glm-?4\.[5-9]|glm-?5", model_id):
        return "enable_thinking"
    return "system_prompt"


def is_base_model(model: LLMModel) -> bool:
    """Annotated as a pretrained model that continues text (labels.BASE_MODEL)."""
    return (model.metadata.annotations or {}).get(L.BASE_MODEL) == "true"


@dataclass(frozen=True)
class Served:
    """Where any model answers now, exposed as a tool or not: where a guard's judge is asked."""

    model_id: str
    endpoint: str  # its OpenAI base URL


def served_names(model: LLMModel) -> dict[str, Served]:
    """Where the model answers, by each name a judge may be given (modelId, namespace/name).

    Nothing while it does not serve.
    """
    status = model.status
    if status is None or not status.endpoint or status.phase not in SERVING_PHASES:
        return {}
    return dict.fromkeys(names_of(model), Served(model.spec.model_id, status.endpoint))


def from_model(model: LLMModel, source: Source, key: str | None = None) -> ToolRecord | None:
    """The model's tool, or None when it is not exposed over MCP."""
    exposure = model.spec.mcp_exposure
    if not exposure.enabled or not exposure.tool_name:
        return None
    info = {k: v for k, v in summary(model).items() if k != "vramPerAcceleratorGiB"}
    return ToolRecord(
        tool_name=exposure.tool_name,
        description=(exposure.tool_description or "").strip()
        or f"Chat with {model.spec.model_id} ({model.name}).",
        model_id=model.spec.model_id,
        endpoint=model.status.endpoint if model.status else None,
        source=source, key=key or f"{model.namespace}/{model.name}",
        facets=facets(model), remote=model.spec.is_remote,
        thinking_style=thinking_style(model), info=info, base_model=is_base_model(model),
        guardrails=model.spec.guardrails)


def adapter_tool_name(model: LLMModel, adapter: LoraAdapterSpec) -> str | None:
    """An adapter's tool name: its own, else the model's, a dot and the adapter's name."""
    tool = model.spec.mcp_exposure.tool_name
    return adapter.tool_name or (f"{tool}.{adapter.name}" if tool else None)


def records_of(model: LLMModel, source: Source, key: str | None = None) -> list[ToolRecord]:
    """The model's tool and one for each of its LoRA adapters (none unless exposed)."""
    record = from_model(model, source, key)
    if record is None:
        return []
    out = [record]
    spec = model.spec
    for adapter in spec.lora_adapters or ():
        tool = adapter_tool_name(model, adapter)
        assert tool is not None  # the model's record exists: it has a tool name
        request: dict[str, Any] = {}
        if spec.inference_engine == "llamacpp":
            request = {"model": spec.model_id,
                       "lora": llamacpp_selection(spec, adapter.name)}
        elif spec.inference_engine == "sglang":  # SGLang names an adapter in lora_path
            request = {"model": spec.model_id, "lora_path": adapter.name}
        info = {**record.info, "toolName": tool, "modelId": adapter.name,
                "adapterOf": spec.model_id}
        out.append(replace(
            record, tool_name=tool, model_id=adapter.name, key=f"{record.key}#lora:{adapter.name}",
            description=(adapter.tool_description or "").strip()
            or f"Chat with {spec.model_id} through its LoRA adapter {adapter.name} "
            f"({model.name}).", info=info, request=request))
    return out


class AdminPayloadError(ValueError):
    """An admin API body that cannot become a tool; the message says what to fix."""


CLUSTER_SUFFIXES = (".svc", ".svc.cluster.local")
METADATA_NAMES = frozenset({"metadata", "metadata.google.internal", "instance-data"})


def endpoint_problem(url: str, allowed: Sequence[str] = ()) -> str | None:
    """Why the admin API must not call ``url`` (None: it may).

    Allowed: loopback, in-cluster Service names (one label, or ending in .svc /
    .svc.cluster.local), and ``allowed`` hosts (an entry starting with "." is a suffix).
    Never: link-local addresses and cloud metadata names, whatever the setting says.
    """
    parts = urlsplit(url)
    host = (parts.hostname or "").lower().rstrip(".")
    if parts.scheme not in ("http", "https") or not host:
        return "endpoint must be an http(s) URL, e.g. http://svc.ns:8000/v1"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if host in METADATA_NAMES or (ip is not None and (ip.is_link_local or ip.is_multicast
                                                      or ip.is_unspecified)):
        return f"endpoint host {host} is link-local or a cloud metadata service: refused"
    if any(host == a.lower() or (a.startswith(".") and host.endswith(a.lower()))
           for a in allowed):
        return None
    if (ip is not None and ip.is_loopback) or host == "localhost" or (ip is None and (
            "." not in host or host.endswith(CLUSTER_SUFFIXES))):
        return None
    return (f"endpoint host {host} is outside the cluster: use a Service name "
            "(name.namespace.svc), or allow it with llmop mcp --admin-endpoint-host")


def from_admin(url_name: str, body: Any, allowed_hosts: Sequence[str] = ()) -> ToolRecord:
    """The guide's admin payload {name, description, endpoint, modelId, domains} as a tool."""
    if not isinstance(body, Mapping):
        raise AdminPayloadError("body must be a JSON object with name, description, endpoint, "
                                "modelId and domains")
    name = body.get("name")
    if name != url_name:
        raise AdminPayloadError(f"toolName in URL ({url_name!r}) must match name in body "
                                f"({name!r})")
    if not re.fullmatch(MCP_TOOL_NAME, url_name):
        raise AdminPayloadError("name must be 1-128 characters of A-Z a-z 0-9 _ - .")
    problems = [f"{k} must be a non-empty string" for k in ("endpoint", "modelId")
                if not isinstance(body.get(k), str) or not body.get(k)]
    endpoint = str(body.get("endpoint") or "")
    if endpoint and (problem := endpoint_problem(endpoint, allowed_hosts)):
        problems.append(problem)
    domains = body.get("domains", [])
    if not isinstance(domains, list) or not all(isinstance(d, str) for d in domains):
        problems.append("domains must be a list of strings")
        domains = []
    context = body.get("contextWindowK")
    if context is not None and (not isinstance(context, int) or context < 1):
        problems.append("contextWindowK must be a positive integer")
    thinking = body.get("supportsThinking", False)
    if not isinstance(thinking, bool):
        problems.append("supportsThinking must be true or false")
    if problems:
        raise AdminPayloadError("; ".join(problems))
    labels = {f"{L.DOMAIN_PREFIX}{d}": "true" for d in domains}
    info = {"name": url_name, "namespace": None, "toolName": url_name,
            "modelId": body["modelId"], "domains": domains, "contextWindowK": context,
            "supportsThinking": thinking, "vendor": None, "mode": None,
            "status": "Ready", "endpoint": endpoint}
    return ToolRecord(
        tool_name=url_name, description=str(body.get("description") or "").strip()
        or f"Chat with {body['modelId']}.", model_id=str(body["modelId"]), endpoint=endpoint,
        source="admin", key=url_name,
        facets=Facets(labels=labels, context_window_k=context, supports_thinking=thinking,
                      phase="Ready"),
        remote=False, thinking_style="system_prompt", info=info)


class Catalog:
    """Records per source; the visible tools are the callable ones, merged by precedence.

    Every mutation returns whether the visible tool list changed, so the server notifies
    clients only when there is something new to fetch.
    """

    def __init__(self) -> None:
        self._records: dict[Source, dict[str, ToolRecord]] = {s: {} for s in PRECEDENCE}
        self._served: dict[Source, Mapping[str, Served]] = {s: {} for s in PRECEDENCE}
        self._visible: dict[str, ToolRecord] = {}
        self.shadowed: list[tuple[ToolRecord, ToolRecord]] = []  # (hidden, winner), last merge
        self.version = 0

    def put(self, record: ToolRecord) -> bool:
        self._records[record.source][record.key] = record
        return self._merge()

    def remove(self, source: Source, key: str) -> bool:
        if self._records[source].pop(key, None) is None:
            return False
        return self._merge()

    def replace(self, source: Source, records: Iterable[ToolRecord]) -> bool:
        """Swap a source's whole content (after a relist or a directory rescan)."""
        self._records[source] = {r.key: r for r in records}
        return self._merge()

    def set_served(self, source: Source, served: Mapping[str, Served]) -> None:
        """Every model a source knows that serves now, by the names a judge may give."""
        self._served[source] = dict(served)

    def served(self, name: str) -> Served | None:
        """Where the model called ``name`` answers (sources by precedence), if it serves."""
        for source in PRECEDENCE:
            found = self._served[source].get(name)
            if found is not None:
                return found
        return None

    def records(self, source: Source) -> list[ToolRecord]:
        return sorted(self._records[source].values(), key=lambda r: r.key)

    def _merge(self) -> bool:
        visible: dict[str, ToolRecord] = {}
        shadowed: list[tuple[ToolRecord, ToolRecord]] = []
        for source in PRECEDENCE:
            for record in sorted(self._records[source].values(), key=lambda r: r.key):
                if not record.callable:
                    continue
                winner = visible.get(record.tool_name)
                if winner is None:
                    visible[record.tool_name] = record
                else:
                    shadowed.append((record, winner))
        self.shadowed = shadowed
        if visible == self._visible:
            return False
        self._visible = visible
        self.version += 1
        return True

    def tools(self) -> list[ToolRecord]:
        """Callable tools, ordered by name (deterministic pages)."""
        return [self._visible[name] for name in sorted(self._visible)]

    def get(self, tool_name: str) -> ToolRecord | None:
        return self._visible.get(tool_name)

    def not_callable(self, tool_name: str) -> ToolRecord | None:
        """A known but not callable record under this name (to explain a failed call)."""
        for source in PRECEDENCE:
            for record in self._records[source].values():
                if record.tool_name == tool_name:
                    return record
        return None

    def outranked(self, tool_name: str, source: Source) -> ToolRecord | None:
        """A record of a source that takes precedence over ``source`` under this name."""
        for higher in PRECEDENCE[:PRECEDENCE.index(source)]:
            for record in self._records[higher].values():
                if record.tool_name == tool_name:
                    return record
        return None

    def find(self, query: Query) -> list[ToolRecord]:
        return [r for r in self.tools() if accepts(query, r.facets)]

    def __len__(self) -> int:
        return len(self._visible)
