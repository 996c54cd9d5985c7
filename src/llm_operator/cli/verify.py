"""`llmop model-verify`: check a GGUF file's SHA-256 and read its header (the init container)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

import click

from llm_operator.local.modelfile import ModelFileError, choose, inspect

TERMINATION_LOG = Path("/dev/termination-log")


def report(termination_log: Path | None, text: str) -> None:
    """Write the termination message (at most 4096 bytes).

    Kubernetes shows it in the container's status: the operator reads the file's facts, or
    why it failed, from there.
    """
    if termination_log is not None:
        with contextlib.suppress(OSError):
            termination_log.write_text(text[:4096], encoding="utf-8")


@click.command(name="model-verify")
@click.argument("path", required=False, type=click.Path(path_type=Path))
@click.option("--dir", "source_dir", type=click.Path(path_type=Path, file_okay=False),
              help="Pick the GGUF file a download left here (the first by name, "
              "mmproj* projectors aside) instead of naming PATH.")
@click.option("--sha256", metavar="HEX", help="The SHA-256 the file must have.")
@click.option("--choose", "chosen", metavar="FILE", type=click.Path(path_type=Path),
              help="Write the checked file's path here (the next init container serves it).")
@click.option("--include", "patterns", multiple=True, metavar="GLOB",
              help="With --dir: pick the first file whose name matches (repeatable).")
@click.option("--link", type=click.Path(path_type=Path, dir_okay=False),
              help="Make this a symbolic link to the checked file (relative, so that it "
              "holds wherever the directory is mounted): a pool's preset names it.")
@click.option("--markers", type=click.Path(path_type=Path, file_okay=False),
              help="Also note the file's digest here when its own directory cannot be "
              "written (a node file mounted read-only), so a retry does not hash it again.")
@click.option("--termination-log", type=click.Path(path_type=Path),
              default=lambda: str(TERMINATION_LOG) if TERMINATION_LOG.parent.is_dir() and
              TERMINATION_LOG.exists() else None,
              help="Where Kubernetes reads the result from [default: /dev/termination-log "
              "when it exists].")
def model_verify(path: Path | None, *, source_dir: Path | None, sha256: str | None,
                 chosen: Path | None, patterns: tuple[str, ...], link: Path | None,
                 markers: Path | None,
                 termination_log: Path | None) -> None:
    """Check a GGUF model file: its SHA-256 (when given) and its header.

    \b
    Prints what the header says as JSON (status.model); exits 1 with the reason when the
    file must not be served: ChecksumMismatch, NotGGUF or NoModelFile. The digest is
    computed once per file (noted beside it, or under --markers): kubelet's retries of a
    file that failed do not read it again until it changes.
    \b
    Examples:
      llmop model-verify models/gemma.gguf
      llmop model-verify --dir /model-cache/source --sha256 4f0e…c2 --choose /model-cache/.gguf \\
        --markers /model-cache/.llmop-verified
      llmop model-verify --dir /models/qa/source --link /models/qa/model.gguf
    """
    if (path is None) == (source_dir is None):
        raise click.UsageError("give a PATH or --dir, not both")
    try:
        target = path if path is not None else choose(source_dir, patterns)  # type: ignore[arg-type]
        if not target.is_file():
            raise ModelFileError("NoModelFile", f"{target} does not exist")
        facts = inspect(target, sha256.lower() if sha256 else None, markers)
    except ModelFileError as exc:
        report(termination_log, f"{exc.reason}: {exc}")
        click.echo(f"{exc.reason}: {exc}", err=True)
        sys.exit(1)
    if chosen is not None:
        chosen.write_text(str(target), encoding="utf-8")
    if link is not None:
        made = link.with_name(f".{link.name}.new")
        made.unlink(missing_ok=True)
        made.symlink_to(os.path.relpath(target, link.parent))
        made.replace(link)  # never a moment without the link, should a retry run
    text = json.dumps(facts.model_dump(by_alias=True, exclude_none=True), sort_keys=True)
    report(termination_log, text)
    click.echo(text)
