"""Operator settings: images, selectors, storage, Prometheus and KEDA, overridable without code."""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from llm_operator.profiles.tracing import Tracing


class _Settings(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True,
    )


class Images(_Settings):
    """Container images. `engines` overrides the vendor profiles' engine images."""

    operator: str = Field(
        "ghcr.io/example/llm-operator:v0.1.0",
        description="The project's own image: gateway for remote models and the Hugging Face "
        "downloader (ships the `hf` CLI).",
    )
    s3_downloader: str = Field("amazon/aws-cli:2.34.48", alias="s3Downloader")
    oci_downloader: str = "ghcr.io/oras-project/oras:v1.3.4"
    engines: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="vendor -> engine -> image overrides."
    )
    pause: str = Field("registry.k8s.io/pause:3.10", min_length=1, description="What a "
                       "prefetch pod runs once it has pulled a model's images.")
    pull_policy: Literal["IfNotPresent", "Always", "Never"] = "IfNotPresent"
    pull_secrets: list[str] = Field(default_factory=list)


class VendorOverride(_Settings):
    """Replaces a vendor profile's node selector and/or tolerations."""

    node_selector: dict[str, str] | None = None
    tolerations: list[dict[str, Any]] | None = None


class Storage(_Settings):
    """The per-model weights cache (PersistentVolumeClaim)."""

    storage_class_name: str | None = Field(
        None, description="StorageClass for model caches; the cluster default when unset."
    )
    access_mode: Literal["ReadWriteOnce", "ReadWriteMany", "ReadWriteOncePod"] = "ReadWriteOnce"
    min_size_gi_b: int = Field(20, alias="minSizeGiB", ge=1)


class CompileCache(_Settings):
    """vLLM's torch.compile artifacts kept on each node, shared by the pods that start there."""

    host_path: str | None = Field(
        None, pattern=r"^/[^\s]*[^/\s]$",
        description="A directory on each node (created when missing) where vLLM pods keep "
        "their compile cache (VLLM_CACHE_ROOT), in a subdirectory per namespace: a restarted "
        "or scaled-out replica loads the compiled graphs instead of compiling them again. "
        "Off when unset (the cache lives and dies with the pod). Pods mount it as a "
        "hostPath, which namespaces enforcing the baseline or restricted Pod Security "
        "Standard refuse.")


class HttpAddon(_Settings):
    """KEDA HTTP add-on, used for scale-from-zero with request buffering."""

    enabled: bool = True
    external_scaler_address: str = "keda-add-ons-http-external-scaler.keda:9090"
    target_pending_requests: int = Field(
        100, ge=1,
        description="In-flight requests per replica for the add-on's own scaling. High on "
        "purpose: LLM servers batch many concurrent requests, so the HTTP trigger only wakes "
        "the model and the queue-depth trigger decides how many replicas serve.")


class Keda(_Settings):
    polling_interval_seconds: int = Field(15, ge=1)
    activation_threshold: str = Field(
        "0", description="Queue depth above which a scaled-to-zero model activates."
    )
    http_addon: HttpAddon = Field(default_factory=HttpAddon)


class Monitoring(_Settings):
    kind: Literal["ServiceMonitor", "PodMonitor", "None"] = "ServiceMonitor"
    interval: str = "15s"
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="Extra labels so your Prometheus selects the monitors (e.g. release).",
    )


class Gateway(_Settings):
    replicas: int = Field(2, ge=1, le=100)
    network_policy: bool = Field(
        True, description="Render a NetworkPolicy per remote model's gateway: ingress only "
        "from LLM clients, the MCP server and Prometheus; egress only to DNS and the "
        "provider's port.")
    prometheus_namespace: str = Field(
        "monitoring", description="Namespace whose pods may scrape the gateway's /metrics.")
    redis_url: str | None = Field(
        None, pattern=r"^(redis|rediss)://[^@\s]+$",
        description="Share each remote model's rate limit across its gateway replicas in this "
        "Redis (no password in the URL: use redisPasswordSecret); unset: each replica "
        "enforces limit / replicas.")
    redis_password_secret: str | None = Field(
        None, description="Secret (key 'password') in the model's namespace with the Redis "
        "password.")
    egress_proxy: str | None = Field(
        None, pattern=r"^http://[A-Za-z0-9.\-\[\]:]+/?$",
        description="HTTP proxy every gateway reaches its provider through "
        "(http://host:port, no credentials): set as HTTPS_PROXY and HTTP_PROXY; the "
        "NetworkPolicy lets the gateway reach its port.")
    no_proxy: list[str] = Field(
        default_factory=lambda: [".svc", ".cluster.local"],
        description="With egressProxy: hosts called directly (NO_PROXY; names, subdomains, "
        "IPs, CIDRs).")

    @model_validator(mode="after")
    def _proxy_has_a_port(self) -> Gateway:
        if self.egress_proxy is not None:
            parsed = urlsplit(self.egress_proxy)
            if parsed.hostname is None or parsed.port is None:
                raise ValueError("egressProxy: give the proxy as http://host:port")
        return self

    @property
    def egress_proxy_port(self) -> int | None:
        return None if self.egress_proxy is None else urlsplit(self.egress_proxy).port


class McpPush(_Settings):
    """Optional pushes to the MCP server's admin API (its Kubernetes watch is enough)."""

    admin_url: str | None = Field(
        None, description="e.g. http://mcp-server.ai-models.svc:3000; unset: no pushes and "
        "no finalizer on LLMModels.")
    token_file: str = Field("/var/run/secrets/mcp-admin/token",
                            description="File holding the admin API's bearer token.")
    attempts: int = Field(5, ge=1, le=20, description="Deregistration attempts on delete "
                          "before a Warning event and releasing the finalizer.")
    timeout_seconds: float = Field(5.0, gt=0, le=60)


class EndpointPicker(_Settings):
    """The Gateway API Inference Extension's endpoint picker (EPP) each pool names."""

    service: str = Field(
        "{name}-epp", min_length=1, max_length=253,
        description="Its Service in the model's namespace; {name} is the model's name "
        "(llm-d deploys one picker per pool).")
    port: int = Field(9002, ge=1, le=65535, description="The picker's gRPC (ext-proc) port.")
    failure_mode: Literal["FailOpen", "FailClose"] = Field(
        "FailClose", description="What the gateway does when the picker does not answer.")
    deploy: bool = Field(
        True, description="Deploy the picker per model (Deployment, Service, RBAC, plugin "
        "ConfigMap, named as `service`); false: you run it (llm-d's chart, say).")
    image: str = Field(
        "registry.k8s.io/gateway-api-inference-extension/epp:v1.5.0", min_length=1,
        description="The picker's image (the Gateway API Inference Extension's EPP).")
    scorers: dict[str, int] = Field(
        default_factory=lambda: {"queue-scorer": 2, "kv-cache-utilization-scorer": 2,
                                 "prefix-cache-scorer": 3},
        description="The picker's scorer plugins and their weights, in order (its "
        "EndpointPickerConfig); weight 0 leaves one out.")

    @model_validator(mode="after")
    def _some_scorer(self) -> EndpointPicker:
        if self.deploy and not any(self.scorers.values()):
            raise ValueError("endpointPicker.scorers needs at least one scorer with a "
                             "weight above 0")
        if any(w < 0 for w in self.scorers.values()):
            raise ValueError("endpointPicker.scorers weights must be 0 or more")
        return self


class ParentGateway(_Settings):
    """The Gateway the HTTPRoutes attach to."""

    name: str = Field("inference-gateway", min_length=1, max_length=253)
    namespace: str | None = Field(None, max_length=63,
                                  description="Default: the model's namespace.")


class InferencePool(_Settings):
    """An InferencePool, its endpoint picker and an HTTPRoute per vLLM or SGLang model."""

    enabled: bool = Field(
        False, description="For clusters that run llm-d or another Gateway API Inference "
        "Extension gateway: it routes to the vLLM and SGLang pods through the pool's "
        "endpoint picker.")
    endpoint_picker: EndpointPicker = Field(default_factory=EndpointPicker)
    gateway: ParentGateway = Field(default_factory=ParentGateway)


class Router(_Settings):
    """The router (config/router): one endpoint for every model (docs/routing.md)."""

    enabled: bool = Field(
        False, description="Local models' ScaledObjects also scale on the requests the "
        "router holds or has in flight (llmop_router_pending_requests, through "
        "Prometheus), so the first request wakes a model at 0 replicas without the KEDA "
        "HTTP add-on. The built-in autoscaler needs it: it reads the router's counts.")
    namespace: str = Field("llm-operator-system", description="Where the router runs.")
    service: str = Field(
        "llmop-router", description="The router's Service: the built-in autoscaler reads "
        "GET /scale from each of its ready endpoints (its EndpointSlices, watched).")
    port_name: str = Field("http", description="The Service port serving /scale.")


class BuiltinAutoscaler(_Settings):
    """The operator's own autoscaler, when KEDA does not scale (docs/autoscaling.md)."""

    interval_seconds: float = Field(
        1.0, gt=0, le=60, description="How often the leader reads the router's counts.")
    stabilization_seconds: float = Field(
        300.0, ge=0, le=3600, description="Scale down only to the highest need seen in "
        "this window (as the HPA's scale-down stabilization): no flapping under steady "
        "load.")


class Disaggregation(_Settings):
    """How prefill/decode disaggregated models are rendered (spec.serving.disaggregation)."""

    workload: Literal["auto", "deployments", "disaggregatedset"] = Field(
        "auto", description="The roles as two Deployments, or as one DisaggregatedSet "
        "(LeaderWorkerSet's, its CRD installed); auto: the DisaggregatedSet when the cluster "
        "serves it, Deployments otherwise (`llmop render`, which sees no cluster: "
        "Deployments).")
    routing_sidecar_image: str = Field(
        "ghcr.io/llm-d/llm-d-routing-sidecar:v0.8.0", min_length=1,
        description="llm-d's routing sidecar in each decode pod: it runs a request's prefill "
        "on the prefill pod the picker chose (header x-prefiller-host-port), then decodes "
        "locally.")
    picker_image: str = Field(
        "ghcr.io/llm-d/llm-d-inference-scheduler:v0.8.0", min_length=1,
        description="The endpoint picker of disaggregated models' pools: llm-d's inference "
        "scheduler, whose plugins pick a decode and a prefill pod (the Inference "
        "Extension's EPP has none).")


class Scheduling(_Settings):
    """The GPU queue and priorities (docs/scheduling.md)."""

    gpu_queue: bool = Field(
        True, description="Hold accelerator models that no node can take now (phase "
        "WaitingForGPU) instead of creating pods that stay Pending. Turn off with a cluster "
        "autoscaler that adds GPU nodes for Pending pods.")
    priority_classes: bool = Field(
        True, description="Give inference pods the PriorityClass llmop-<spec.priority> "
        "(config/default installs them).")


class Gpus(_Settings):
    """How the cluster's NVIDIA GPU operator shares GPUs (spec.resources.gpuSharing)."""

    mig_strategy: Literal["mixed", "single"] = Field(
        "mixed", description="The GPU operator's MIG strategy: mixed advertises each "
        "instance as nvidia.com/mig-<profile>; single partitions every GPU of a node alike and "
        "advertises them as nvidia.com/gpu, the product label ending in -MIG-<profile>.")
    shared_resource: str = Field(
        "nvidia.com/gpu", pattern=r"^[a-z0-9.-]+/[a-z0-9.-]+$",
        description="What a time-sliced GPU is requested as: nvidia.com/gpu, or "
        "nvidia.com/gpu.shared where the device plugin renames shared GPUs "
        "(renameByDefault: true).")


class DeviceClass(_Settings):
    """A vendor's DRA device class, and how its driver names what the selectors read."""

    name: str = Field(min_length=1, max_length=253, description="The DeviceClass a claim "
                      "asks (installed by the vendor's DRA driver).")
    driver: str = Field(min_length=1, max_length=63, pattern=r"^[a-z0-9.-]+$",
                        description="The driver's name: the domain of its devices' "
                        "attributes and capacities in CEL, and of its ResourceSlices.")
    memory_capacity: str = Field("memory", description="The capacity holding a device's "
                                 "memory (a quantity).")
    product_attribute: str | None = Field(
        "productName", description="The attribute holding the card's name (a string), "
        "matched against preferredAcceleratorModel; null: not selected on.")


def _device_classes() -> dict[str, DeviceClass]:
    return {"nvidia": DeviceClass(name="gpu.nvidia.com", driver="gpu.nvidia.com"),
            "amd": DeviceClass(name="gpu.amd.com", driver="gpu.amd.com"),
            "intel-gaudi": DeviceClass(name="gaudi.intel.com", driver="gaudi.intel.com",
                                       product_attribute="model")}


class Dra(_Settings):
    """Dynamic Resource Allocation (resources.allocation: dra): each vendor's device class."""

    device_classes: dict[str, DeviceClass] = Field(
        default_factory=_device_classes, description="vendor -> the device class its claims "
        "ask for (NVIDIA's, AMD's and Intel's DRA drivers by default).")


MountMode = Literal["image-volume", "modelcar", "pull"]


class ModelImages(_Settings):
    """How a model image (modelSource.type oci) reaches the engine (docs/model-images.md)."""

    mount: Literal["auto", "image-volume", "modelcar", "pull"] = Field(
        "auto", description="image-volume: the image mounted read-only as a volume "
        "(Kubernetes 1.35+, containerd 2.1+ or CRI-O 1.33+); modelcar: the image runs as a "
        "sidecar whose files the engine reads through the pod's shared process namespace "
        "(any runtime; the image needs sh, ln and sleep, e.g. built on busybox); pull: "
        "oras pulls it into the model cache (an OCI artifact). auto: image-volume when "
        "every node that may run the model can mount image volumes, else modelcar "
        "(`llmop render`, which sees no nodes: image-volume).")


class Settings(_Settings):
    """Everything an operator administrator can change without touching code."""

    images: Images = Field(default_factory=Images)
    vendors: dict[str, VendorOverride] = Field(default_factory=dict)
    storage: Storage = Field(default_factory=Storage)
    compile_cache: CompileCache = Field(default_factory=CompileCache)
    download_timeout_seconds: int = Field(7200, ge=60)
    hugging_face_endpoint: str | None = Field(
        None, alias="huggingFaceEndpoint", pattern=r"^https?://[^\s/]+(/\S*)?$",
        description="A Hugging Face Hub-compatible server that model and LoRA downloads use "
        "instead of huggingface.co (HF_ENDPOINT): a mirror or proxy such as olah, e.g. "
        "http://hf-mirror.models.svc:8090.")
    startup_timeout_seconds: int = Field(
        1800, ge=60, description="How long a model may take to load before liveness applies."
    )
    drain_seconds: int = Field(
        20, ge=0, le=3600,
        description="How long an inference pod that is shutting down (rollout, scale-down, "
        "eviction) keeps serving its in-flight requests after it has left its Service: a "
        "preStop sleep, then the engine is stopped. Raise it for long generations.")
    prometheus_address: str = (
        "http://prometheus-kube-prometheus-prometheus.monitoring.svc.cluster.local:9090"
    )
    status_metrics: bool = Field(
        False, description="Fill status.requestsPerMinute and averageLatencyMs from "
        "prometheusAddress on every reconcile.")
    keda: Keda = Field(default_factory=Keda)
    monitoring: Monitoring = Field(default_factory=Monitoring)
    gateway: Gateway = Field(default_factory=Gateway)
    mcp: McpPush = Field(default_factory=McpPush)
    scheduling: Scheduling = Field(default_factory=Scheduling)
    inference_pool: InferencePool = Field(default_factory=InferencePool)
    router: Router = Field(default_factory=Router)
    autoscaler: Literal["auto", "keda", "builtin"] = Field(
        "auto", description="Who sets an autoscaled model's replicas: keda (a ScaledObject "
        "per model), builtin (the operator, from the router's counts), or auto: KEDA when "
        "its CRDs are installed, builtin otherwise (and KEDA from when it appears).")
    builtin_autoscaler: BuiltinAutoscaler = Field(default_factory=BuiltinAutoscaler)
    disaggregation: Disaggregation = Field(default_factory=Disaggregation)
    model_images: ModelImages = Field(default_factory=ModelImages)
    gpus: Gpus = Field(default_factory=Gpus)
    dra: Dra = Field(default_factory=Dra)
    tracing: Tracing = Field(default_factory=Tracing, description="The operator's own "
                             "OpenTelemetry traces: a span per reconcile, one per apply "
                             "(docs/tracing.md). Off unless an endpoint is set here or in "
                             "OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT.")
    cluster_domain: str = "cluster.local"


DEFAULT_SETTINGS = Settings()
