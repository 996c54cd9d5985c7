"""`llmop model-fetch`: download a model from a Hugging Face Hub (its init container)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from llm_operator.cli.verify import TERMINATION_LOG, report
from llm_operator.fetch.hub import FetchError, HubSource, fetch


@click.command(name="model-fetch")
@click.argument("repo")
@click.option("--dest", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="The directory to download into (files already complete are kept).")
@click.option("--include", "includes", multiple=True, metavar="GLOB",
              help="Only the files matching (repeatable): a GGUF quantization's pattern.")
@click.option("--exclude", "excludes", multiple=True, metavar="GLOB",
              help="Leave out the files matching (repeatable).")
@click.option("--token-secret", metavar="NAME",
              help="The Secret $HF_TOKEN came from: named in messages, never the token.")
@click.option("--termination-log", type=click.Path(path_type=Path),
              default=lambda: str(TERMINATION_LOG) if TERMINATION_LOG.exists() else None,
              help="Where Kubernetes reads why it failed [default: /dev/termination-log "
              "when it exists].")
def model_fetch(repo: str, *, dest: Path, includes: tuple[str, ...],
                excludes: tuple[str, ...], token_secret: str | None,
                termination_log: Path | None) -> None:
    """Download REPO's files from a Hugging Face Hub into --dest.

    \b
    The server is $HF_ENDPOINT (a mirror such as olah; default huggingface.co) and the token
    $HF_TOKEN. The repo's file list is read first: a repo that does not exist or is not
    readable with the token (RepoNotFound, TokenRefused) or no file matching the filters
    (NoMatchingFile) exits 1 with that reason before anything is downloaded, and the
    operator marks the model Failed with it. Other failures (DownloadFailed) are retried.
    \b
    Examples:
      llmop model-fetch google/gemma-3-270m --dest /model-cache/source --exclude '*.pth'
      HF_ENDPOINT=http://10.0.0.5:8090 llmop model-fetch test/gemma-gguf --dest /m \\
        --include '*Q4_K_M*.gguf'
    """
    source = HubSource(repo, includes, excludes, token_secret)
    try:
        files = fetch(source, dest, os.environ.get("HF_TOKEN") or None,
                      os.environ.get("HF_ENDPOINT") or None)
    except FetchError as exc:
        report(termination_log, f"{exc.reason}: {exc}")
        click.echo(f"{exc.reason}: {exc}", err=True)
        sys.exit(1)
    click.echo(f"downloaded {len(files)} files of {repo} into {dest}")
