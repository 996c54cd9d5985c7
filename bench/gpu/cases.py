"""The cases bench/gpu measures: an LLMModel per row and llama-server's rendered arguments.

    python bench/gpu/cases.py > bench/gpu/cases.json

Each case is an NVIDIA llama.cpp LLMModel on an H100; its llama-server arguments are the
ones the operator renders for the pod (``llama_server_args`` with the accelerator on), with
the model path, host and port left as ``{model}``, ``{host}`` and ``{port}`` for
measure.py. compare.py builds the same models again to put the planner's estimate beside
what the card held.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from shapes import SHAPES

from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.profiles.llamaserver import Where, llama_server_args

FILE_QUANT = {"Q4_K_M": "GGUF-Q4_K_M", "F16": "GGUF-F16", "Q8_0": "GGUF-Q8_0"}


@dataclass(frozen=True)
class Case:
    """One model file served at one context size and slot count."""

    shape: str
    quant: str  # the file's type: Q4_K_M, F16, Q8_0
    context_k: int  # per slot
    slots: int
    tokens_per_second: bool = False

    @property
    def id(self) -> str:
        name = f"{self.shape}-{self.quant}-{self.context_k}k-x{self.slots}"
        return name.lower().replace(".", "").replace("_", "")

    @property
    def file(self) -> str:
        return f"{self.shape}-{self.quant.lower().replace('_', '')}.gguf"


CASES = (
    Case("llama-3.1-8b", "Q4_K_M", 8, 1),
    Case("llama-3.1-8b", "Q4_K_M", 16, 4),
    Case("llama-3.1-8b", "Q4_K_M", 4, 8, tokens_per_second=True),
    Case("llama-3.1-8b", "F16", 8, 1),
    Case("llama-3.1-8b", "F16", 16, 4),
    Case("gemma-3-4b", "Q4_K_M", 8, 1),
    Case("gemma-3-4b", "Q4_K_M", 16, 4),
    Case("qwen3-30b-a3b", "Q8_0", 8, 1),
    Case("qwen3-30b-a3b", "Q8_0", 16, 4),
)


def model(case: Case) -> LLMModel:
    """The LLMModel a user would write for this file on one H100."""
    shape = SHAPES[case.shape]
    spec: dict[str, object] = {
        "modelId": f"bench/{case.shape}", "deploymentMode": "local",
        "acceleratorVendor": "nvidia", "inferenceEngine": "llamacpp",
        "modelType": "MoE" if shape.experts else "Dense",
        "totalParametersBillions": round(shape.total_params_b, 2),
        "quantization": FILE_QUANT[case.quant], "contextWindowK": case.context_k,
        "domains": ["general"], "llamaCpp": {"parallelSlots": case.slots},
        "resources": {"acceleratorCount": 1, "preferredAcceleratorModel": "H100",
                      "cpuMillicores": 8000, "memoryGiB": 32},
        "modelSource": {"type": "huggingface"},
    }
    if shape.experts:
        spec["activeParametersBillions"] = round(shape.active_params_b, 2)
    return LLMModel.model_validate({"apiVersion": "ai.example.io/v1alpha1", "kind": "LLMModel",
                                    "metadata": {"name": case.id, "namespace": "bench"},
                                    "spec": spec})


def rendered_args(case: Case) -> list[str]:
    where = Where(model_path="{model}", host="{host}", port=0, on_accelerator=True)
    args = list(llama_server_args(model(case).spec, where).args)
    args[args.index("--port") + 1] = "{port}"
    return args


def main() -> None:
    print(json.dumps([{"id": c.id, "shape": c.shape, "file": c.file,
                       "vocab": SHAPES[c.shape].vocab, "context_per_slot": c.context_k * 1024,
                       "slots": c.slots, "tokens_per_second": c.tokens_per_second,
                       "args": rendered_args(c)} for c in CASES], indent=1))


if __name__ == "__main__":
    main()
