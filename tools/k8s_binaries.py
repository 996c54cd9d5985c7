"""Unpack the real Kubernetes binaries (control plane and node) for tests, checking their hashes.

    python tools/k8s_binaries.py [SOURCE_DIR] [TARGET_DIR]

SOURCE_DIR holds ``<name>.xz`` and ``SHA256SUMS`` (default ../shared/k8s); TARGET_DIR gets
the executables (default .cache/k8s/bin). The test node's containerd 2.3.4 (``containerd``,
``containerd-shim-runc-v2``, ``ctr``) comes the same way from ../shared/containerd into the
same directory. A binary already unpacked with the right hash is kept. Standard library
only: it runs before the virtualenv exists.
"""

from __future__ import annotations

import hashlib
import lzma
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NAMES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy")
CONTAINERD_NAMES = ("containerd", "containerd-shim-runc-v2", "ctr")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def unpack(source: Path, target: Path, names: tuple[str, ...] = NAMES) -> list[str]:
    sums = dict(reversed(line.split()) for line in
                (source / "SHA256SUMS").read_text().splitlines() if line.strip())
    target.mkdir(parents=True, exist_ok=True)
    done = []
    for name in names:
        out = target / name
        if out.exists() and sha256(out) == sums[name]:
            continue
        partial = out.with_suffix(".partial")
        with lzma.open(source / f"{name}.xz") as packed, partial.open("wb") as f:
            while block := packed.read(1 << 20):
                f.write(block)
        if sha256(partial) != sums[name]:
            partial.unlink()
            raise SystemExit(f"{source / name}.xz: SHA-256 does not match SHA256SUMS")
        partial.chmod(0o755)
        os.replace(partial, out)
        done.append(name)
    return done


if __name__ == "__main__":
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO.parent / "shared" / "k8s"
    dst = Path(sys.argv[2]) if len(sys.argv) > 2 else REPO / ".cache" / "k8s" / "bin"
    if not src.is_dir():
        raise SystemExit(f"{src}: the Kubernetes control-plane binaries are not there")
    containerd = src.parent / "containerd"
    if not containerd.is_dir():
        raise SystemExit(f"{containerd}: the test node's containerd 2.3.4 is not there")
    for unpacked in [*unpack(src, dst), *unpack(containerd, dst, CONTAINERD_NAMES)]:
        print(f">> unpacked {unpacked} into {dst}")
