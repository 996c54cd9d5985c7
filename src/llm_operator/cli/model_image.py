"""`llmop model-image`: pack a GGUF file or a model directory as an OCI image, without Docker."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from llm_operator.images.model_image import build


@click.command(name="model-image")
@click.argument("source", type=click.Path(path_type=Path, exists=True))
@click.option("-t", "--tag", required=True, metavar="REF",
              help="The image's name, e.g. registry.example.com/models/gemma-3-270m:q4_k_m.")
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="The docker-archive tar to write.")
@click.option("--base", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="A docker-archive to build on (e.g. busybox, for a modelcar: it needs sh, "
              "ln and sleep). Without it the image holds only the model.")
@click.option("--arch", default="amd64", show_default=True,
              help="The platform's architecture, without --base (the base's otherwise).")
def model_image(source: Path, *, tag: str, output: Path, base: Path | None, arch: str) -> None:
    """Pack SOURCE, a GGUF file or a model directory, as the image TAG under /models.

    \b
    The image follows the convention of KServe's modelcars: the weights under /models, which
    the operator mounts at the engine's model path as an image volume (operator setting
    modelImages.mount: image-volume or auto) or shares from a modelcar sidecar (modelcar;
    build on a base with sh). Hidden files (.git, .cache) are left out. The output is a
    docker-archive: load it into a node's containerd, or push it to a registry.
    \b
    Examples:
      llmop model-image gemma-3-270m-Q4_K_M.gguf -t models.local/gemma-3-270m:q4 -o gemma.tar
      llmop model-image ./gemma-3-270m-hf -t models.local/gemma-3-270m:bf16 -o g.tar \\
        --base busybox.tar
      ctr -n k8s.io images import gemma.tar           # on a node
      skopeo copy docker-archive:gemma.tar docker://registry.example.com/models/gemma:q4
    """
    try:
        build(source, tag, output, base=base, arch=arch)
    except (OSError, ValueError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    click.echo(f"wrote {tag} to {output} ({output.stat().st_size / 2**20:.1f} MiB)")
