"""Gateway configuration: routes from client-facing model names to upstream APIs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    Field,
    ValidationError,
    model_validator,
)

from llm_operator.api.guardrails import GuardrailsSpec
from llm_operator.api.rules import GEMINI_MESSAGE, GEMINI_NATIVE_MESSAGE, gemini_url_fits
from llm_operator.api.validation import field_errors
from llm_operator.gateway.settings.flow_control import FlowControl
from llm_operator.gateway.settings.model import SettingsModel as _Config
from llm_operator.profiles.tracing import Tracing

HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")  # RFC 9110 token


class ApiKeySource(_Config):
    """Where the upstream key comes from; exactly one of the two.

    A file (a mounted Secret, re-read when it changes) or an environment variable.
    """

    file: str | None = Field(None, description="A file holding the key, e.g. a mounted "
                             "Secret; re-read when it changes.")
    env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                            description="An environment variable holding the key.")

    @model_validator(mode="after")
    def _exactly_one(self) -> ApiKeySource:
        if (self.file is None) == (self.env is None):
            raise ValueError("set exactly one of file or env")
        return self


AuthStyle = Literal["bearer", "x-api-key", "x-goog-api-key", "none"]
UpstreamApi = Literal["openai", "anthropic", "gemini"]
DEFAULT_AUTH: dict[str, AuthStyle] = {"openai": "bearer", "anthropic": "x-api-key",
                                      "gemini": "x-goog-api-key"}


class Upstream(_Config):
    """One deployment of a route's model: an OpenAI-compatible API or a native one."""

    name: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,62}$",
                             description="In x-llmop-upstream and metrics; default: its host.")
    weight: float = Field(1.0, gt=0, le=1000,
                          description="Share of the route's traffic (several upstreams).")
    api: UpstreamApi = Field(
        "openai", description="What the upstream speaks: openai (passed through), anthropic "
        "(Messages API) or gemini (generateContent); chat completions are translated.")
    base_url: str = Field(pattern=r"^https?://\S+$",
                          description="Base URL including the version: .../v1, or "
                          "https://generativelanguage.googleapis.com/v1beta for gemini.")
    model: str | None = Field(None, min_length=1,
                              description="Upstream model id; default: the route's first name.")
    api_key: ApiKeySource | None = None
    auth: AuthStyle | None = Field(
        None,
        description="How the key is sent; default: the api's own (bearer for openai, "
        "x-api-key for anthropic, x-goog-api-key for gemini). none: local engines.",
    )
    headers: dict[str, str] = Field(
        default_factory=dict, description="Extra static headers (anthropic-version is set "
        "for anthropic unless given here).")
    default_max_tokens: int = Field(
        4096, ge=1, le=1_000_000, description="max_tokens for an anthropic upstream when the "
        "client sets none (its API requires one).")
    max_concurrent: int | None = Field(
        None, ge=1, le=100_000, description="Requests the upstream takes at once (a local "
        "engine's slots plus the queue it may hold); at the limit the gateway answers 503 "
        "with Retry-After instead of sending more; with flow control, requests queued for "
        "the route count too. Unset: no limit.")
    slots: int | None = Field(
        None, ge=1, le=100_000, description="Requests the upstream serves at once (an "
        "engine's slots or max sequences): with flow control the gateway sends no more and "
        "queues the rest by priority and fairness. Unset: flowControl.perReplicaConcurrency, "
        "else the route is not flow-controlled.")

    @model_validator(mode="after")
    def _url_fits_api(self) -> Upstream:
        for name, value in self.headers.items():
            if not HEADER_NAME.fullmatch(name) or "\r" in value or "\n" in value:
                raise ValueError(f"headers: {name!r} is not a valid header (a name is letters, "
                                 "digits and -_.!#$%&'*+^`|~; a value has no line break)")
        if not gemini_url_fits(self.base_url, self.api):
            message = GEMINI_NATIVE_MESSAGE if self.api == "gemini" else GEMINI_MESSAGE
            raise ValueError(message.removeprefix("remoteApi.")
                             .replace("remoteApi.api", "api"))
        return self

    @property
    def key_style(self) -> AuthStyle:
        return self.auth or DEFAULT_AUTH[self.api]

    @property
    def label(self) -> str:
        return self.name or urlsplit(self.base_url).netloc


class RateLimit(_Config):
    """The route's limits, across its clients (a client key has its own): 429 beyond them."""

    requests_per_minute: int | None = Field(None, ge=1, description="Requests a minute; "
                                            "unset: no limit.")
    tokens_per_minute: int | None = Field(None, ge=1, description="Prompt and completion "
                                          "tokens a minute, reserved before a request goes "
                                          "upstream; unset: no limit.")


class Timeouts(_Config):
    """How long the gateway waits for an upstream."""

    connect_seconds: float = Field(5.0, gt=0, le=300, description="To connect to an "
                                   "upstream (a proxy's tunnel included).")
    request_seconds: float = Field(
        600.0, gt=0, le=86_400,
        description="Deadline for the whole request, retries included (streams: until the "
        "first byte).",
    )


class Retry(_Config):
    """Upstream failures tried again: 429, 502-504, 529 and connection errors."""

    attempts: int = Field(3, ge=1, le=10, description="Total tries, the first included.")
    backoff_initial_seconds: float = Field(0.25, ge=0, le=60, description="The first "
                                           "backoff; it doubles each try, with jitter.")
    backoff_max_seconds: float = Field(8.0, ge=0, le=600, description="The longest "
                                       "backoff.")
    on_rate_limit: bool = Field(True, description="Retry an upstream 429 after its "
                                "Retry-After; false passes it on at once.")


class CircuitBreaker(_Config):
    """Per route and upstream: fail fast while an upstream keeps failing."""

    failure_threshold: int = Field(5, ge=1, le=1000,
                                   description="Consecutive failures that open the circuit.")
    open_seconds: float = Field(30.0, gt=0, le=3600, description="How long an open "
                                "circuit refuses before one trial request decides.")


class Pricing(_Config):
    """What the route's tokens cost, for the cost metrics and client keys' budgets."""

    input_per_million: float = Field(ge=0, description="USD per million prompt tokens.")
    output_per_million: float = Field(ge=0, description="USD per million completion "
                                      "tokens.")
    batch_factor: float = Field(0.5, ge=0, le=1, description="What a request of a batch "
                                "(the Batch API) pays of these prices; OpenAI's is half.")


class Balancing(_Config):
    """How a request picks among the route's upstreams (docs/routing.md)."""

    strategy: Literal["weighted", "least-load", "prefix-hash", "prefix-cache",
                      "model-hash"] = Field(
        "weighted", description="weighted: drawn by weight; least-load: fewest requests in "
        "flight and queued; prefix-hash: requests that begin alike go to the same upstream "
        "(its prefix cache), unless it is over loadBound times its share; prefix-cache: to "
        "the upstream that was sent most of the prompt's beginning, then the least loaded; "
        "model-hash: the route's requests go to the same upstream (a model pool's replica "
        "that has the model loaded), unless it is over loadBound times its share.")
    prefix_chars: int | None = Field(
        None, ge=16, le=1_000_000, description="Characters of the prompt that choose: "
        "prefix-hash hashes them (256), prefix-cache indexes them (32768).")
    load_bound: float = Field(2.0, ge=1.0, le=10.0,
                              description="prefix-hash, prefix-cache: most load an upstream "
                              "takes, as a multiple of the average share, before the next "
                              "one is used.")

    @property
    def chars(self) -> int:
        """How much of the prompt chooses the upstream."""
        if self.prefix_chars is not None:
            return self.prefix_chars
        return 32_768 if self.strategy == "prefix-cache" else 256


class HoldSettings(_Config):
    """A route whose model has no replica yet: requests wait for one instead of failing."""

    seconds: float = Field(300.0, gt=0, le=3600, description="How long one request waits.")
    reason: str = Field("", max_length=1024, description="Why it waits, in the keepalives "
                        "and the 503, e.g. the model's phase.")
    keepalive_seconds: float = Field(5.0, gt=0, le=120,
                                     description="Streams: an SSE comment this often.")


class SleepMode(_Config):
    """Engines that share one accelerator and take turns: vLLM's sleep mode.

    At most ``maxAwake`` of a group's upstreams are awake at once; a request for one asleep
    waits while the least recently used idle one is put to sleep (``POST /sleep?level=1``:
    its weights to host memory, its KV cache dropped) and its own is woken
    (``POST /wake_up``). The engines run with ``--enable-sleep-mode`` and
    ``VLLM_SERVER_DEV_MODE=1`` (docs/gateway.md).
    """

    group: str = Field(min_length=1, max_length=300, description="The engines that share "
                       "one accelerator; every route of the group declares the same maxAwake.")
    pinned: bool = Field(
        False, description="This route's engine is never put to sleep for another (it may "
        "be woken): fewer routes of the group than maxAwake are pinned.")
    control: Literal["vllm", "llama-router"] = Field(
        "vllm", description="How an engine is put to sleep and woken: vllm, each route's "
        "upstream a vLLM engine in sleep mode; llama-router, each route a member of "
        "llama-server's router mode at its upstream (POST /models/unload and /models/load, "
        "the member named by the model sent upstream).")
    max_awake: int = Field(1, ge=1, le=64, description="Engines of the group awake at once: "
                           "as many as the accelerator's memory holds with their KV caches.")
    min_awake_seconds: float = Field(
        0.0, ge=0, le=3600, description="A woken engine stays awake this long before it may "
        "be put to sleep for another; a request for an engine asleep waits meanwhile "
        "(against thrash). The same on every route of the group.")
    max_wakes_per_minute: int | None = Field(
        None, ge=1, le=600, description="Engines the group wakes per minute at most; a wake "
        "past it waits (against thrash). Unset: no budget. The same on every route of the "
        "group.")


class Route(_Config):
    """Client-facing model names served by one upstream."""

    name: str | None = Field(None, min_length=1, description="Metrics label; default models[0].")
    models: list[str] = Field(min_length=1, description="The names clients may ask for, "
                              "listed in /v1/models.")
    aliases: list[str] = Field(
        default_factory=list, description="More names the route answers to, sent upstream "
        "as models[0] (the router's metadata.name and namespace/name). /v1/models lists one "
        "only for a client key that may use none of models.")
    upstream: Upstream | None = Field(None, description="The API serving these models.")
    upstreams: list[Upstream] | None = Field(
        None, description="Several deployments instead (keys, regions, providers, "
        "replicas): traffic split by balancing, failover on 429, 5xx, timeouts and open "
        "circuits within the request's deadline. Empty only with hold.")
    balancing: Balancing = Field(default_factory=Balancing)
    hold: HoldSettings | None = Field(None, description="Wait while there is no upstream (a model "
                              "scaled to zero) instead of answering 503 at once.")
    set_fields: dict[str, Any] = Field(
        default_factory=dict, description="Body fields set on every request to an "
        "OpenAI-compatible upstream, over the client's: e.g. llama-server's "
        "lora: [{id: 0, scale: 1.0}] for a route that names one of its LoRA adapters.")
    stream_upstream: bool = Field(
        False, description="Send plain chat and text completions to the upstream as streams "
        "and assemble the answer: llama-server stops generating for a client that left only "
        "when it streams.")
    default_fields: dict[str, Any] = Field(
        default_factory=dict, description="Body fields sent to an OpenAI-compatible upstream "
        "when the client's request has none of that name: e.g. lora: [{id: 0, scale: 0}] "
        "on a llama.cpp model's base route (no adapter unless the client names one).")
    pool: str | None = Field(
        None, min_length=1, max_length=300, description="Routes naming one pool share its "
        "upstreams' slots and one flow-control queue (a model and its LoRA adapters' "
        "routes); default: the route's own.")
    guardrails: GuardrailsSpec | None = Field(
        None, description="Guards on the route's requests and answers, as an LLMModel's "
        "spec.guardrails (docs/guardrails.md).")
    rate_limit: RateLimit = Field(default_factory=RateLimit)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    retry: Retry = Field(default_factory=Retry)
    circuit_breaker: CircuitBreaker = Field(default_factory=CircuitBreaker)
    pricing: Pricing | None = None
    owned_by: str | None = Field(None, min_length=1, max_length=253,
                                 description="/v1/models owned_by; default the upstream host.")
    sleep: SleepMode | None = Field(
        None, description="The upstream takes turns with others on one accelerator "
        "(vLLM's sleep mode): woken before it is sent a request.")

    @model_validator(mode="after")
    def _one_upstream_field(self) -> Route:
        if (self.upstream is None) == (self.upstreams is None):
            raise ValueError("set exactly one of upstream or upstreams")
        if self.sleep is not None and len(self.deployments) != 1:
            raise ValueError("sleep: a route that takes turns has exactly one upstream (its "
                             "engine); give each engine its own route")
        if self.upstreams == [] and self.hold is None:
            raise ValueError("upstreams: add at least one (an empty list needs hold)")
        labels = [u.label for u in self.deployments]
        if len(set(labels)) != len(labels):
            raise ValueError("upstreams: two share a name (default: the host); give each a "
                             "distinct name")
        return self

    @property
    def pool_name(self) -> str:
        """The flow-control pool the route's requests queue in."""
        return self.pool or self.label

    @property
    def deployments(self) -> list[Upstream]:
        """Every upstream of the route (one for ``upstream``)."""
        return [self.upstream] if self.upstream is not None else list(self.upstreams or [])

    @property
    def label(self) -> str:
        return self.name or self.models[0]

    def upstream_model(self, upstream: Upstream) -> str:
        return upstream.model or self.models[0]


class Listen(_Config):
    """Where the gateway listens, and how it stops."""

    host: str = Field("0.0.0.0", description="The address to listen on (all interfaces, "
                      "as a server in a pod does).")
    port: int = Field(8000, ge=0, le=65535, description="The port (0: any free one).")
    drain_seconds: float = Field(
        25, ge=0, le=3600, description="On SIGTERM or Ctrl-C the gateway stops listening "
        "and gives the requests in flight this long to finish; then it cancels them (their "
        "guards and upstream calls with them) and exits. Keep it below the pod's "
        "terminationGracePeriodSeconds.")


class ClientKeys(_Config):
    """Where the keys clients must present are listed (SHA-256 digests; docs/gateway.md)."""

    file: str = Field(min_length=1, description="YAML keys file, e.g. a mounted Secret; "
                      "re-read when it changes.")


class SharedState(_Config):
    """Redis, where every replica keeps the rate limits and spend (docs/gateway.md)."""

    url: str = Field(pattern=r"^(redis|rediss|unix)://\S+$",
                     description="e.g. redis://redis.llm-operator-system.svc:6379/0")
    password_file: str | None = Field(None, min_length=1,
                                      description="The password, e.g. a mounted Secret.")
    key_prefix: str = Field("llmop", pattern=r"^[A-Za-z0-9:_.-]{1,64}$",
                            description="Prefix of every Redis key the gateway writes.")
    local_share: float = Field(
        1.0, gt=0, le=1, description="The part of each limit this replica enforces on its "
        "own while Redis is down (1 / replicas keeps the whole within the limit).")
    spend_flush_seconds: float = Field(
        0.25, ge=0, le=60, description="Spend is written to Redis this often (0: with every "
        "request); another replica's spend is seen at most this late.")

    def password(self) -> str | None:
        """The password from ``password_file`` (read when called: a mounted Secret)."""
        if self.password_file is None:
            return None
        return Path(self.password_file).read_text(encoding="utf-8").strip()


class Batches(_Config):
    """OpenAI's Files and Batch APIs on this gateway (docs/batch.md)."""

    enabled: bool = Field(False, description="Serve /v1/files and /v1/batches and run "
                          "batches in the lowest flow-control band.")
    path: str | None = Field(None, min_length=1, description="SQLite file of the files, "
                             "batches and results; unset with `redis`: kept in Redis "
                             "(every replica shares them).")
    concurrency: int = Field(16, ge=1, le=1024, description="Batch requests in flight at "
                             "once, all batches together.")
    wake_models: bool = Field(False, description="Send batch requests to a model with no "
                              "replica (it scales up for them); off: they wait for one.")
    retry_seconds: float = Field(5.0, gt=0, le=3600, description="Wait before sending again "
                                 "a request refused for now without Retry-After.")
    poll_seconds: float = Field(2.0, gt=0, le=3600, description="How often the runner "
                                "looks for batches created on another replica.")


class GatewayConfig(_Config):
    listen: Listen = Field(default_factory=Listen)
    redis: SharedState | None = Field(
        None, description="Share limits and spend across replicas; unset: per process.")
    client_keys: ClientKeys | None = Field(
        None, description="Require a client key on every /v1 request; unset: no client "
        "authentication (keep the gateway behind a NetworkPolicy).")
    max_request_bytes: int = Field(10 * 1024 * 1024, ge=1024, description="The largest "
                                   "request body taken; a larger one is refused (413).")
    max_held_per_route: int = Field(100, ge=1, le=100_000,
                                    description="Requests one route may hold at once.")
    max_held: int = Field(1000, ge=1, le=1_000_000,
                          description="Requests all routes may hold at once.")
    flow_control: FlowControl = Field(default_factory=FlowControl)
    tracing: Tracing = Field(default_factory=Tracing, description="OpenTelemetry traces "
                             "(docs/tracing.md); read at start.")
    batch: Batches = Field(default_factory=Batches)
    routes: list[Route] = Field(default_factory=list, description="Model names to "
                                "upstream APIs; a file with none is refused.")

    @model_validator(mode="after")
    def _batch_store(self) -> GatewayConfig:
        if self.batch.enabled and self.batch.path is None and self.redis is None:
            raise ValueError("batch: enabled needs a store: batch.path (a SQLite file) or "
                             "redis (shared by every replica)")
        return self

    @model_validator(mode="after")
    def _route_set(self) -> GatewayConfig:
        check_route_set(self.routes)
        return self


def check_route_set(routes: Sequence[Route]) -> None:
    """What holds across routes: each name routed once, one policy per sleep group.

    ValueError names the route (its index) that breaks it.
    """
    awake: dict[str, tuple[SleepMode, int]] = {}  # group: (its policy, the first route's index)
    pinned: dict[str, list[int]] = {}  # group: the indexes of its pinned routes
    members: dict[str, int] = {}  # group: its routes
    seen: set[str] = set()
    for index, route in enumerate(routes):
        for name in [*route.models, *route.aliases]:
            if name in seen:
                raise ValueError(f"routes[{index}]: model {name!r} is already routed")
            seen.add(name)
        if route.sleep is None:
            continue
        members[route.sleep.group] = members.get(route.sleep.group, 0) + 1
        if route.sleep.pinned:
            pinned.setdefault(route.sleep.group, []).append(index)
        first, at = awake.setdefault(route.sleep.group, (route.sleep, index))
        for name in ("max_awake", "min_awake_seconds", "max_wakes_per_minute", "control"):
            mine, theirs = getattr(route.sleep, name), getattr(first, name)
            if mine != theirs:
                field = SleepMode.model_fields[name].alias or name
                raise ValueError(
                    f"routes[{index}].sleep.{field}: {mine} here but {theirs} in "
                    f"routes[{at}]: every route of sleep group {route.sleep.group!r} "
                    "declares the same")
    for group, indexes in pinned.items():
        places = awake[group][0].max_awake
        if len(indexes) >= places and members[group] > places:
            raise ValueError(
                f"routes[{indexes[-1]}].sleep.pinned: {len(indexes)} routes of sleep group "
                f"{group!r} are pinned and maxAwake is {places}: no place is left for the "
                "others; pin fewer, or raise maxAwake")


class ConfigError(ValueError):
    """The configuration file is unreadable or invalid; the message names the field."""


def parse_config(data: object, source: str = "<config>", *, empty_ok: bool = False
                 ) -> GatewayConfig:
    """A validated config; ConfigError names each bad field.

    A gateway with no routes is only useful where routes arrive later (the local runtime):
    ``empty_ok``.
    """
    try:
        config = GatewayConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(field_errors(exc, source)) from None
    if not config.routes and not empty_ok:
        raise ConfigError(f"{source}: routes: add at least one route")
    return config


def read_yaml(path: str | Path) -> object:
    """A config file's YAML; ConfigError when it cannot be read or parsed."""
    try:
        return yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: malformed YAML: {exc}") from None


def load_config(path: str | Path) -> GatewayConfig:
    return parse_config(read_yaml(path), str(path))
