"""A Hugging Face Hub with no network: olah (PyPI) serving local git repositories.

Each repo is a git repository under ``<mirrors>/models/<org>/<name>`` whose branch is
``main``, as olah's offline mirror reads it. Files over 1 MiB are stored as Git LFS pointers
with the object beside them (.git/lfs/objects), as the Hub stores weights: nothing large is
compressed into git. `huggingface_hub` (HF_ENDPOINT) and `hf download` fetch from it as from
huggingface.co.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx2

LFS_OVER = 1 << 20
GIT = ("git", "-c", "user.name=llmop tests", "-c", "user.email=tests@llmop.invalid",
       "-c", "init.defaultBranch=main")


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def make_repo(mirrors: Path, repo_id: str, files: Mapping[str, Path | bytes]) -> Path:
    """A repo ``org/name`` holding ``files`` (its path in the repo -> a file or bytes)."""
    org, name = repo_id.split("/")
    root = mirrors / "models" / org / name
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    subprocess.run([*GIT, "init", "-q", str(root)], check=True)
    for relative, content in files.items():
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path) and content.stat().st_size > LFS_OVER:
            oid = _sha256(content)
            store = root / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
            store.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):
                os.link(content, store)  # same file system: no copy
            if not store.exists():
                shutil.copyfile(content, store)
            target.write_text("version https://git-lfs.github.com/spec/v1\n"
                              f"oid sha256:{oid}\nsize {content.stat().st_size}\n")
        else:
            target.write_bytes(content.read_bytes() if isinstance(content, Path) else content)
    subprocess.run([*GIT, "-C", str(root), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(root), "commit", "-q", "-m", f"{repo_id}"], check=True)
    return root


@contextlib.contextmanager
def hub(mirrors: Path, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """olah on ``host:port`` (0: a free port) serving the repos under ``mirrors``; its URL."""
    if port == 0:
        from controlplane import free_port  # noqa: PLC0415

        port = free_port()
    work = mirrors.parent / f"olah-{port}"
    work.mkdir(exist_ok=True)
    config = work / "olah.toml"
    config.write_text(
        f'[basic]\nhost = "{host}"\nport = {port}\nrepos-path = "{work / "cache"}"\n'
        f'mirrors-path = ["{mirrors}"]\nmirror-netloc = "{host}:{port}"\n'
        f'mirror-lfs-netloc = "{host}:{port}"\n\n[accessibility]\noffline = true\n')
    olah = Path(sys.executable).with_name("olah-cli")
    url = f"http://{host}:{port}"
    with (work / "olah.log").open("wb") as log:
        proc = subprocess.Popen([str(olah), "-c", str(config)], stdout=log,
                                stderr=subprocess.STDOUT, cwd=work)
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx2.TransportError):
                if httpx2.get(f"{url}/api/models/none/none", timeout=2).status_code < 500:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"olah did not start: {(work / 'olah.log').read_text()}")
            time.sleep(0.2)  # olah has no readiness signal but its port
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
