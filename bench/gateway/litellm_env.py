"""Build a throwaway virtualenv with the LiteLLM proxy, the benchmark's named baseline.

On this registry `pip install litellm[proxy]` cannot resolve (its certifi pin, and the exact
pins of its companion packages litellm-proxy-extras / litellm-enterprise, are newer than what
is served), so: install the wheel with --no-deps, then every requirement its metadata lists
for the base package and the `proxy` extra, with certifi and exact (==) pins unpinned.
"""

from __future__ import annotations

import subprocess
import sys
import venv
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement


def requirements(wheel: Path, extra: str = "proxy") -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        meta_name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(zf.read(meta_name).decode())
    out = []
    for line in meta.get_all("Requires-Dist") or []:
        req = Requirement(line)
        env = {"extra": extra, "python_full_version": "3.11.7", "sys_platform": "linux"}
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        if req.name.lower() == "certifi" or any(s.operator == "==" for s in req.specifier):
            out.append(req.name)
            continue
        req.marker = None
        out.append(str(req))
    return sorted(set(out))


def build(target: Path) -> Path:
    """Create (once) and return the python of a venv with litellm[proxy] installed."""
    python = target / "bin" / "python"
    if (target / ".complete").exists():
        return python
    venv.create(target, with_pip=True)
    download = target / "wheel"
    pip = [str(python), "-m", "pip", "install", "--quiet"]
    subprocess.run([str(python), "-m", "pip", "download", "--quiet", "--no-deps", "litellm",
                    "-d", str(download)], check=True)
    wheel = next(download.glob("litellm-*.whl"))
    subprocess.run([*pip, "--no-deps", str(wheel)], check=True)
    subprocess.run([*pip, *requirements(wheel)], check=True)
    (target / ".complete").touch()
    return python


if __name__ == "__main__":
    print(build(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/llmop-bench-litellm")))
