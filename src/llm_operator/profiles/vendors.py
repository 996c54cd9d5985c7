"""Accelerator vendor profiles: the one place to add a vendor (keys, images, selectors, cards)."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class Accelerator:
    """A known accelerator card: what the planner sizes against."""

    name: str
    memory_gib: int
    aliases: tuple[str, ...]  # lower-case substrings that identify it in a model string


@dataclass(frozen=True)
class VendorProfile:
    """Everything vendor-specific about running an inference pod."""

    name: str
    resource_key: str | None  # extended resource, None for cpu
    node_selector: MappingProxyType[str, str]
    tolerations: tuple[MappingProxyType[str, Any], ...]
    env: tuple[tuple[str, str], ...]
    images: MappingProxyType[str, str | None]  # engine -> image; None = unsupported
    unsupported_reason: MappingProxyType[str, str]  # engine -> why (and what to use)
    metrics_prefix: str | None  # accelerator exporter metric prefix
    accelerators: tuple[Accelerator, ...] = ()
    host_ipc_always: bool = False  # else only with more than one accelerator
    capabilities_add: tuple[str, ...] = ()
    memory_node_label: str | None = None  # numeric node label holding card memory in MiB
    product_node_label: str | None = None  # node label holding the card's product name

    def image_for(self, engine: str) -> str | None:
        return self.images.get(engine)

    def host_ipc(self, accelerator_count: int) -> bool:
        """Shared host IPC: Gaudi always; every vendor for multi-accelerator tensor parallel."""
        return self.resource_key is not None and (self.host_ipc_always or accelerator_count > 1)

    def find_accelerator(self, text: str | None) -> Accelerator | None:
        """The known card a free-form model string names, e.g. "NVIDIA H100 80GB HBM3"."""
        if not text:
            return None
        lowered = text.lower().replace("-", " ")
        for card in sorted(self.accelerators, key=lambda c: -max(len(a) for a in c.aliases)):
            if any(alias in lowered for alias in card.aliases):
                return card
        return None

    @property
    def largest_accelerator(self) -> Accelerator | None:
        return max(self.accelerators, key=lambda c: c.memory_gib, default=None)


def _frozen(mapping: dict[str, Any]) -> MappingProxyType[str, Any]:
    return MappingProxyType(dict(mapping))


def _gpu_toleration(key: str) -> MappingProxyType[str, Any]:
    return _frozen({"key": key, "operator": "Exists", "effect": "NoSchedule"})


# Pinned, real upstream images. Override per vendor and engine in the operator settings
# (settings.images) for mirrored or air-gapped registries.
VLLM_CUDA = "vllm/vllm-openai:v0.33.0"
# vLLM's own x86-64 CPU image (AVX-512 or AVX2); the arm64 one is
# public.ecr.aws/q9t5s3a7/vllm-arm64-cpu-release-repo (settings.images.engines.cpu.vllm).
VLLM_CPU = "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.32.0"
VLLM_ROCM = "rocm/vllm:rocm7.14.0_cdna_ubuntu24.04_py3.14_pytorch_2.11.0_vllm_0.23.0"
VLLM_GAUDI = (
    "vault.habana.ai/gaudi-docker/1.23.0/ubuntu24.04/habanalabs/vllm-installer-2.9.0:latest"
)
LLAMACPP_BUILD = "b11206"
LLAMACPP_CPU = f"ghcr.io/ggml-org/llama.cpp:server-{LLAMACPP_BUILD}"
LLAMACPP_CUDA = f"ghcr.io/ggml-org/llama.cpp:server-cuda-{LLAMACPP_BUILD}"
LLAMACPP_ROCM = f"ghcr.io/ggml-org/llama.cpp:server-rocm-{LLAMACPP_BUILD}"
SGLANG_CUDA = "lmsysorg/sglang:v0.5.3.post3"
SGLANG_ROCM = "lmsysorg/sglang:v0.5.3.post3-rocm700-mi30x"
OLLAMA = "ollama/ollama:0.18.2"
OLLAMA_ROCM = "ollama/ollama:0.18.2-rocm"

_NO_GAUDI = "does not support Intel Gaudi; use inferenceEngine vllm (Intel's Gaudi vLLM)"
_NO_SGLANG_CPU = ("SGLang is served on NVIDIA and AMD GPUs here; use inferenceEngine llamacpp "
                  "or ollama on acceleratorVendor cpu")

VENDORS: MappingProxyType[str, VendorProfile] = MappingProxyType({
    "nvidia": VendorProfile(
        name="nvidia",
        resource_key="nvidia.com/gpu",
        node_selector=_frozen({"nvidia.com/gpu.present": "true"}),
        tolerations=(_gpu_toleration("nvidia.com/gpu"),),
        env=(),
        images=_frozen({"vllm": VLLM_CUDA, "llamacpp": LLAMACPP_CUDA, "ollama": OLLAMA,
                        "sglang": SGLANG_CUDA}),
        unsupported_reason=_frozen({}),
        metrics_prefix="DCGM_FI_DEV",
        accelerators=(
            Accelerator("NVIDIA RTX 4090", 24, ("4090",)),
            Accelerator("NVIDIA RTX 5090", 32, ("5090",)),
            Accelerator("NVIDIA L40S", 48, ("l40s",)),
            Accelerator("NVIDIA A100 80GB", 80, ("a100",)),
            Accelerator("NVIDIA H100 80GB", 80, ("h100",)),
            Accelerator("NVIDIA H200 141GB", 141, ("h200",)),
            Accelerator("NVIDIA B200 192GB", 192, ("b200",)),
        ),
        memory_node_label="nvidia.com/gpu.memory",
        product_node_label="nvidia.com/gpu.product",
    ),
    "amd": VendorProfile(
        name="amd",
        resource_key="amd.com/gpu",
        node_selector=_frozen({"amd.com/gpu.present": "true"}),
        tolerations=(_gpu_toleration("amd.com/gpu"),),
        env=(("HIP_VISIBLE_DEVICES", "all"), ("VLLM_USE_ROCM_FLASH_ATTN", "1")),
        images=_frozen({"vllm": VLLM_ROCM, "llamacpp": LLAMACPP_ROCM, "ollama": OLLAMA_ROCM,
                        "sglang": SGLANG_ROCM}),
        unsupported_reason=_frozen({}),
        metrics_prefix="rocm_smi",
        accelerators=(
            Accelerator("AMD Instinct MI300X", 192, ("mi300x",)),
            Accelerator("AMD Instinct MI325X", 256, ("mi325x",)),
            Accelerator("AMD Instinct MI350X", 288, ("mi350x", "mi355x")),
        ),
    ),
    "intel-gaudi": VendorProfile(
        name="intel-gaudi",
        resource_key="habana.ai/gaudi",
        node_selector=_frozen({"habana.ai/gaudi": "true"}),
        tolerations=(_gpu_toleration("habana.ai/gaudi"),),
        env=(
            ("PT_HPU_ENABLE_LAZY_COLLECTIVES", "true"),
            ("VLLM_SKIP_WARMUP", "false"),
            ("HABANA_VISIBLE_DEVICES", "all"),
            ("OMPI_MCA_btl_vader_single_copy_mechanism", "none"),
        ),
        images=_frozen({"vllm": VLLM_GAUDI, "llamacpp": None, "ollama": None, "sglang": None}),
        unsupported_reason=_frozen({"llamacpp": f"llama.cpp {_NO_GAUDI}",
                                    "ollama": f"Ollama {_NO_GAUDI}",
                                    "sglang": f"SGLang {_NO_GAUDI}"}),
        metrics_prefix="habana",
        accelerators=(
            Accelerator("Intel Gaudi 2", 96, ("gaudi 2", "gaudi2")),
            Accelerator("Intel Gaudi 3", 128, ("gaudi 3", "gaudi3")),
        ),
        host_ipc_always=True,
        capabilities_add=("SYS_NICE",),
    ),
    "cpu": VendorProfile(
        name="cpu",
        resource_key=None,
        node_selector=_frozen({}),
        tolerations=(),
        env=(),
        images=_frozen({"vllm": VLLM_CPU, "llamacpp": LLAMACPP_CPU, "ollama": OLLAMA,
                        "sglang": None}),
        unsupported_reason=_frozen({"sglang": _NO_SGLANG_CPU}),
        metrics_prefix=None,
    ),
})


def vendor(name: str) -> VendorProfile:
    """The profile of a vendor; KeyError names the valid vendors."""
    try:
        return VENDORS[name]
    except KeyError:
        valid = ", ".join(VENDORS)
        raise KeyError(f"unknown acceleratorVendor {name!r}; valid values: {valid}") from None
