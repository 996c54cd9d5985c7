"""`llmop model-image`: a model file or directory packed under /models of a docker-archive."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from llm_operator.cli.main import cli
from llm_operator.images.archive import Layer, tar_entries, write

TAG = "models.local/tiny:q4"


def _run(*args: str) -> Any:
    return CliRunner().invoke(cli, ["model-image", *args])


def _read(archive: Path) -> tuple[dict[str, Any], dict[str, Any], list[list[str]]]:
    """The archive's manifest, config, and each layer's member names (in order)."""
    with tarfile.open(archive) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))[0]  # type: ignore[arg-type]
        config = json.load(tar.extractfile(manifest["Config"]))  # type: ignore[arg-type]
        layers = []
        for name in manifest["Layers"]:
            blob = tar.extractfile(name).read()  # type: ignore[union-attr]
            assert f"sha256:{hashlib.sha256(blob).hexdigest()}" in config["rootfs"]["diff_ids"]
            with tarfile.open(fileobj=io.BytesIO(blob)) as layer:
                layers.append(layer.getnames())
    return manifest, config, layers


def test_a_gguf_file_lands_under_models(tmp_path: Path) -> None:
    gguf = tmp_path / "tiny-Q4_K_M.gguf"
    gguf.write_bytes(b"GGUF" + bytes(1000))
    result = _run(str(gguf), "-t", TAG, "-o", str(tmp_path / "out.tar"))
    assert result.exit_code == 0, result.output
    assert f"wrote {TAG} to" in result.output
    manifest, config, layers = _read(tmp_path / "out.tar")
    assert manifest["RepoTags"] == [TAG]
    assert layers == [["models", "models/tiny-Q4_K_M.gguf"]]
    assert config["config"]["Labels"] == {"ai.example.io/model-files": "/models"}
    assert (config["os"], config["architecture"]) == ("linux", "amd64")


def test_a_directory_keeps_its_tree_and_leaves_hidden_files_out(tmp_path: Path) -> None:
    model = tmp_path / "gemma-hf"
    (model / "sub").mkdir(parents=True)
    (model / ".cache" / "huggingface").mkdir(parents=True)
    for name in ("config.json", "model.safetensors", "sub/tokenizer.json",
                 ".cache/huggingface/x.lock", ".gitattributes"):
        (model / name).write_text(name)
    assert _run(str(model), "-t", TAG, "-o", str(tmp_path / "out.tar")).exit_code == 0
    _, _, layers = _read(tmp_path / "out.tar")
    assert layers == [["models", "models/config.json", "models/model.safetensors",
                       "models/sub", "models/sub/tokenizer.json"]]


def test_the_same_input_gives_the_same_image(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(bytes(4096))
    configs = []
    for out in ("a.tar", "b.tar"):
        assert _run(str(gguf), "-t", TAG, "-o", str(tmp_path / out)).exit_code == 0
        configs.append(_read(tmp_path / out)[0]["Config"])
    assert configs[0] == configs[1]


def test_a_base_images_layers_and_command_come_first(tmp_path: Path) -> None:
    (tmp_path / "sh").write_bytes(b"#!busybox")
    (tmp_path / "sh").chmod(0o755)
    base_layer = Layer(tar_entries(tmp_path / "base.tar.layer", [("bin", None),
                                                                 ("bin/sh", tmp_path / "sh")]))
    write(tmp_path / "busybox.tar", "busybox:1", [base_layer],
          {"architecture": "arm64", "os": "linux", "config": {"Cmd": ["sh"]}})
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(bytes(10))
    result = _run(str(gguf), "-t", TAG, "-o", str(tmp_path / "out.tar"),
                  "--base", str(tmp_path / "busybox.tar"))
    assert result.exit_code == 0, result.output
    _, config, layers = _read(tmp_path / "out.tar")
    assert layers == [["bin", "bin/sh"], ["models", "models/m.gguf"]]
    assert config["config"]["Cmd"] == ["sh"]
    assert config["architecture"] == "arm64"  # the base's platform, not --arch
    assert len(config["rootfs"]["diff_ids"]) == 2


@pytest.mark.parametrize(("make", "message"), [
    (lambda d: d / "missing.gguf", "does not exist"),
    (lambda d: (d / "empty").mkdir() or d / "empty", "holds no files"),
])
def test_nothing_to_pack_is_a_clear_error(tmp_path: Path, make: Any, message: str) -> None:
    result = _run(str(make(tmp_path)), "-t", TAG, "-o", str(tmp_path / "out.tar"))
    assert result.exit_code != 0
    assert message in result.output
    assert not (tmp_path / "out.tar").exists()
