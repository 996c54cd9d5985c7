"""Every label, annotation and finalizer key the project uses, and the discovery labels."""

from __future__ import annotations

from llm_operator.api.v1alpha1 import GROUP, LLMModelSpec

PREFIX = f"{GROUP}/"

# --- keys on children -----------------------------------------------------------------
MODEL_NAME = f"{PREFIX}model-name"
# a pool's engine (spec.pool): its pods, Service and preset carry the pool's name
POOL = f"{PREFIX}pool"
# On a model's prefetch pods instead of MODEL_NAME, which its Service, monitors and pools
# select: they hold images, never serve.
PREFETCH_FOR = f"{PREFIX}prefetch-for"
ENGINE = f"{PREFIX}engine"
VENDOR = f"{PREFIX}vendor"
MODE = f"{PREFIX}mode"
APP = "app"
K8S_NAME = "app.kubernetes.io/name"
K8S_INSTANCE = "app.kubernetes.io/instance"
K8S_COMPONENT = "app.kubernetes.io/component"
K8S_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "llm-operator"
# Set by the LeaderWorkerSet controller on every pod of a group: "0" on its leader.
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
# A disaggregated model's pods: prefill or decode (llm-d's label, read by its picker).
ROLE = "llm-d.ai/role"
LLM_CLIENT = f"{PREFIX}llm-client"

# --- annotations -----------------------------------------------------------------------
CONFIG_HASH = f"{PREFIX}config-hash"
SCHEMA_VERSION = f"{PREFIX}schema-version"
PROMETHEUS_SCRAPE = "prometheus.io/scrape"
PROMETHEUS_PORT = "prometheus.io/port"
PROMETHEUS_PATH = "prometheus.io/path"
HTTP_ADDON_SKIP_SCALEDOBJECT = "httpscaledobject.keda.sh/skip-scaledobject-creation"
# On an LLMModel: "true" for a pretrained model that continues text rather than following
# chat turns; `llmop chat` and its MCP tool then ask it with a Q/A transcript.
BASE_MODEL = f"{PREFIX}base-model"

# --- finalizers ------------------------------------------------------------------------
MCP_CLEANUP_FINALIZER = f"{PREFIX}mcp-cleanup"
# On an LLMModel that `llmop up --register` published: the Lease its machine renews.
REGISTERED_BY = f"{PREFIX}registered-by"

# --- discovery labels on the LLMModel itself ------------------------------------------
DOMAIN_PREFIX = f"{PREFIX}domain-"
VRAM_TIER = f"{PREFIX}vram-tier"
MODEL_TYPE = f"{PREFIX}model-type"
QUANTIZATION = f"{PREFIX}quantization"
DEPLOYMENT_MODE = f"{PREFIX}deployment-mode"
ACCELERATOR_VENDOR = f"{PREFIX}accelerator-vendor"

# Cumulative context tiers: a model gets every tier whose threshold (in K tokens) it reaches.
CONTEXT_TIERS: tuple[tuple[int, str], ...] = (
    (10000, f"{PREFIX}context-10m"),
    (1000, f"{PREFIX}context-1m"),
    (256, f"{PREFIX}context-256k"),
    (128, f"{PREFIX}context-128k"),
    (64, f"{PREFIX}context-64k"),
    (0, f"{PREFIX}context-32k"),
)

# VRAM tiers: (upper bound in GiB, tier); above the last bound is "multi-accelerator".
VRAM_TIERS: tuple[tuple[int, str], ...] = (
    (0, "cpu"), (8, "8gb"), (16, "16gb"), (24, "24gb"), (48, "48gb"), (80, "80gb"),
    (141, "141gb"), (192, "192gb"),
)
VRAM_TIER_ABOVE = "multi-accelerator"


def vram_tier(vram_gib: int) -> str:
    """The guide's VRAM tier for a per-accelerator requirement in GiB."""
    for bound, tier in VRAM_TIERS:
        if vram_gib <= bound:
            return tier
    return VRAM_TIER_ABOVE


def tiers_at_most(max_vram_gib: float) -> list[str]:
    """Tier values whose models need at most ``max_vram_gib`` (for label selectors)."""
    return [tier for bound, tier in VRAM_TIERS if bound <= max_vram_gib]


def is_discovery_key(key: str) -> bool:
    """True for label keys the operator owns on an LLMModel (and may remove)."""
    return (
        key.startswith(DOMAIN_PREFIX)
        or key in {VRAM_TIER, MODEL_TYPE, QUANTIZATION, DEPLOYMENT_MODE, ACCELERATOR_VENDOR}
        or any(key == label for _, label in CONTEXT_TIERS)
    )


def discovery_labels(spec: LLMModelSpec) -> dict[str, str]:
    """The complete desired set of discovery labels for a spec.

    As the guide defines them, except for remote models, which get no vram-tier and no
    accelerator-vendor label (they use no accelerator; see docs/deviations.md).
    """
    labels = {f"{DOMAIN_PREFIX}{domain}": "true" for domain in spec.domains or ()}
    context_k = spec.context_window_k or 0
    labels.update({label: "true" for threshold, label in CONTEXT_TIERS if context_k >= threshold})
    labels[MODEL_TYPE] = spec.model_type
    labels[QUANTIZATION] = spec.quantization
    labels[DEPLOYMENT_MODE] = spec.deployment_mode
    if not spec.is_remote:
        labels[VRAM_TIER] = vram_tier(spec.resources.vram_per_accelerator_gi_b or 0)
        labels[ACCELERATOR_VENDOR] = spec.accelerator_vendor
    return dict(sorted(labels.items()))


def reconcile_labels(current: dict[str, str], spec: LLMModelSpec) -> dict[str, str | None]:
    """A merge patch turning ``current`` labels into the desired discovery set.

    Keys mapped to None are removed; user labels (non-discovery keys) are never touched.
    Empty when nothing needs to change.
    """
    desired = discovery_labels(spec)
    patch: dict[str, str | None] = {
        key: None for key in current if is_discovery_key(key) and key not in desired
    }
    patch.update({k: v for k, v in desired.items() if current.get(k) != v})
    return dict(sorted(patch.items()))
