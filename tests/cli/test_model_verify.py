"""`llmop model-verify`: what the model-verify init container does, on real GGUF files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import gguf
import pytest
from click.testing import CliRunner, Result

from llm_operator.cli.main import cli
from llm_operator.local import modelfile
from llm_operator.local.modelfile import MARKER_SUFFIX

from ggufs import write_gguf


def gguf_file(path: Path, layers: int = 4) -> Path:
    """A small GGUF written by llama.cpp's own gguf package."""

    def fill(writer: gguf.GGUFWriter) -> None:
        writer.add_name("tiny")
        writer.add_block_count(layers)
        writer.add_embedding_length(64)
        writer.add_head_count(4)
        writer.add_head_count_kv(2)
        writer.add_file_type(7)

    return write_gguf(path, "llama", fill)


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, ["model-verify", *args])


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_file_that_matches_prints_its_facts_and_reports_them(tmp_path: Path) -> None:
    model = gguf_file(tmp_path / "source" / "tiny-Q8_0.gguf")
    gguf_file(tmp_path / "source" / "mmproj-tiny.gguf")  # a projector is never the model
    log, chosen = tmp_path / "termination-log", tmp_path / "chosen"
    result = run("--dir", str(tmp_path / "source"), "--sha256", sha(model).upper(),
                 "--choose", str(chosen), "--termination-log", str(log))
    assert result.exit_code == 0, result.output
    facts = json.loads(result.output)
    assert facts == json.loads(log.read_text())
    assert (facts["file"], facts["layers"], facts["headCountKV"], facts["quantization"]) == \
        ("tiny-Q8_0.gguf", 4, 2, "Q8_0")
    assert facts["sha256"] == sha(model) and chosen.read_text() == str(model)


def test_a_mismatch_exits_1_and_says_why_in_the_termination_message(tmp_path: Path) -> None:
    model = gguf_file(tmp_path / "m.gguf")
    log = tmp_path / "termination-log"
    result = run(str(model), "--sha256", "0" * 64, "--termination-log", str(log))
    assert result.exit_code == 1
    assert log.read_text().startswith(f"ChecksumMismatch: m.gguf has SHA-256 {sha(model)}; "
                                      f"modelSource.sha256 expects {'0' * 64}")


def test_a_checked_file_is_not_hashed_again_until_it_changes(tmp_path: Path) -> None:
    model = gguf_file(tmp_path / "m.gguf")
    assert run(str(model), "--sha256", sha(model)).exit_code == 0
    marker = model.with_name(model.name + MARKER_SUFFIX)
    assert marker.read_text().endswith(sha(model))
    marker.write_text(marker.read_text().rsplit(" ", 1)[0] + " " + "f" * 64)  # a forged digest
    assert run(str(model), "--sha256", "f" * 64).exit_code == 0  # trusted: the file is as hashed
    gguf_file(model, layers=5)  # rewritten: the marker no longer describes it
    assert run(str(model), "--sha256", "f" * 64).exit_code == 1


@pytest.mark.parametrize(("setup", "args", "message"), [
    (lambda d: (d / "source").mkdir(), ["--dir", "{d}/source"], "NoModelFile: no .gguf file"),
    (lambda d: (d / "x.gguf").write_bytes(b"GGML" + bytes(64)), ["{d}/x.gguf"],
     "NotGGUF: x.gguf: not a GGUF file"),
    (lambda d: None, ["{d}/absent.gguf"], "NoModelFile: {d}/absent.gguf does not exist"),
])
def test_what_must_not_be_served_is_named(tmp_path: Path, setup: object, args: list[str],
                                          message: str) -> None:
    setup(tmp_path)  # type: ignore[operator]
    result = run(*[a.format(d=tmp_path) for a in args])
    assert result.exit_code == 1
    assert message.format(d=tmp_path) in result.output


def test_a_file_that_failed_is_not_read_again_by_kubelets_retries(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """#35: a node file mounted read-only took no marker, so every retry of the failing init
    container hashed the whole file again (fine for 250 MB, not for 100 GB)."""
    model = gguf_file(tmp_path / "node" / "m.gguf")
    model.with_name(model.name + MARKER_SUFFIX).mkdir()  # nothing can be written beside it
    reads: list[Path] = []
    read = modelfile.read_sha256
    monkeypatch.setattr(modelfile, "read_sha256", lambda p: reads.append(p) or read(p))
    markers = ["--markers", str(tmp_path / "cache" / ".llmop-verified")]
    outputs = [run(str(model), "--sha256", "0" * 64, *markers) for _ in range(3)]
    assert [o.exit_code for o in outputs] == [1, 1, 1]
    assert len(reads) == 1  # hashed once; the retries read the digest noted in the cache
    assert "hashed once: the file is not read again until it or the spec changes" in \
        outputs[-1].output
    assert run(str(model), "--sha256", sha(model), *markers).exit_code == 0  # spec fixed
    assert len(reads) == 1
    gguf_file(model, layers=5)  # the file changed: read again
    assert run(str(model), "--sha256", sha(model), *markers).exit_code == 0
    assert len(reads) == 2


def test_link_points_at_the_picked_file_wherever_its_directory_is_mounted(
        tmp_path: Path) -> None:
    """A pool's downloaded member: the preset names the link, the download picks the file."""
    member = tmp_path / "member"
    picked = gguf_file(member / "source" / "gemma-3-270m-Q4_K_M.gguf")
    link = member / "model.gguf"
    for _ in range(2):  # a retry replaces it
        result = run("--dir", str(member / "source"), "--link", str(link))
        assert result.exit_code == 0, result.output
    assert link.is_symlink() and link.readlink() == Path("source") / picked.name
    moved = tmp_path / "elsewhere"
    member.rename(moved)  # as the pool's engine mounts the claim at another path
    assert (moved / "model.gguf").resolve() == (moved / "source" / picked.name).resolve()
    assert sorted(p.name for p in moved.iterdir()) == ["model.gguf", "source"]  # no leftover


def test_include_picks_the_file_of_the_quantization_among_earlier_ones(
        tmp_path: Path) -> None:
    """A pool member's claim outlives an edit of its quantization: the earlier file stays."""
    source = tmp_path / "source"
    gguf_file(source / "gemma-3-270m-Q4_K_M.gguf")
    wanted = gguf_file(source / "gemma-3-270m-Q8_0.gguf")
    link = tmp_path / "model.gguf"
    result = run("--dir", str(source), "--include", "*Q8_0*.gguf", "--include",
                 "*q8_0*.gguf", "--link", str(link))
    assert result.exit_code == 0, result.output
    assert link.resolve() == wanted.resolve()
    result = run("--dir", str(source), "--include", "*Q2_K*.gguf")
    assert result.exit_code == 1
    assert "NoModelFile: no .gguf file matching *Q2_K*.gguf was downloaded" in result.output
