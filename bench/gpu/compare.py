"""The planner's estimate beside what the card held, per measured case (docs/planner.md).

    python bench/gpu/compare.py bench/gpu/results/h200-2026-11-27.json

For each case of cases.py: the estimate from the spec alone (what `llmop validate` and
admission see) and from the file's header (what the operator sees once model-verify has
read it, built here from the same metadata make_gguf.py wrote), against the memory
nvidia-smi charged to llama-server after full-context requests on every slot.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from cases import CASES, Case, model
from shapes import SHAPES

from llm_operator.api.model_status import ModelFileStatus
from llm_operator.api.v1alpha1 import LLMModelStatus
from llm_operator.profiles.gguf import GgufHeader, describe
from llm_operator.profiles.planner import plan

MIB = 2**20
GIB = 2**30


def header_status(case: Case, size_bytes: int) -> ModelFileStatus:
    """status.model as model-verify would write it for this case's file."""
    s = SHAPES[case.shape]
    a = s.arch
    meta: dict[str, object] = {
        "general.architecture": a, f"{a}.block_count": s.layers,
        f"{a}.context_length": s.context, f"{a}.embedding_length": s.embd,
        f"{a}.attention.head_count": s.heads, f"{a}.attention.head_count_kv": s.kv_heads,
        f"{a}.attention.key_length": s.head_dim, f"{a}.attention.value_length": s.head_dim,
    }
    if s.swa:
        meta[f"{a}.attention.sliding_window"] = s.swa
    return describe(GgufHeader(3, 0, meta), file=case.file, size_bytes=size_bytes)


def main() -> None:
    results = json.loads(Path(sys.argv[1]).read_text())
    measured = {r["id"]: r for r in results["rows"]}
    print("| case | measured GiB | spec estimate | ratio | from header | ratio |")
    print("|---|---|---|---|---|---|")
    for case in CASES:
        row = measured.get(case.id)
        if row is None:
            continue
        held = row["after_process_mib"] * MIB / GIB
        m = model(case)
        spec_est = plan(m).estimated_memory_gib
        status = LLMModelStatus(model=header_status(case, row["file_bytes"]))
        file_est = plan(m.model_copy(update={"status": status})).estimated_memory_gib
        print(f"| {case.id} | {held:.2f} | {spec_est:.2f} | {spec_est / held:.2f} | "
              f"{file_est:.2f} | {file_est / held:.2f} |")


if __name__ == "__main__":
    main()
