"""llama.cpp's llama-server, compiled once per machine from the pinned PyPI source and cached.

The source is the llama-cpp-python sdist, which vendors llama.cpp's whole tree (server
included). Only the ``llama-server`` target is built: no web UI download, no TLS, one
static binary (with the multimodal library, which llama-server links). `llmop up` runs it
for every llama.cpp model, and the cluster's llama-server image (tools/images.py) carries
the same file.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TextIO

SOURCE_PACKAGE = "llama-cpp-python"
SOURCE_VERSION = "0.3.36"  # its vendor/llama.cpp is what runs, here and in the image
BINARY = "llama-server"
# One static binary without the web UI (nothing downloaded while building), TLS (it listens
# on loopback, or behind a Service) or anything but the server.
COMMON_FLAGS = ("-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF",
                "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF",
                "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF")
# x86-64: any CPU with AVX2, not -march=native, whose AMX kernels crash on Sapphire Rapids
# class CPUs (ggml-org/llama.cpp#20824); and the image's binary runs on other nodes.
X86_64_FLAGS = ("-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON",
                "-DGGML_F16C=ON", "-DGGML_BMI2=ON")
# What runs once per request or never per token (argument parsing, chat templates and
# their parsers, the HTTP server and its routes, the multimodal loader) compiles at -O1: a
# sixth less compile CPU (635 -> 537 s on 2 cores, 5 min 24 s -> 4 min 33 s), tokens/s
# unchanged within noise (docs/benchmarks.md). ggml's kernels, libllama (graphs, sampling)
# and the server's slot loop (server-context) keep -O3. A CMake project include (run after
# project(); its deferred code after every target exists): a target a later llama.cpp
# renames is left as it was, and so is everything under a CMake older than 3.19 (no DEFER).
LIGHT_TARGETS = ("llama-common-base", "llama-common", "mtmd", "llama-server-impl",
                 "llama-server", "cpp-httplib")
# The same targets and server-context's sources other than the slot loop compile as unity
# files (CMake's UNITY_BUILD: 8 sources included into one unit), so that what they all
# include (nlohmann's json.hpp, the standard library) is parsed once per 8: on a slow
# 2-core machine 922 -> 693 CPU-s (0.75x), 8 min 12 s -> 6 min 15 s, 206 -> 112 steps
# (docs/benchmarks.md, session 44). Each unit keeps its target's flags; libllama and ggml
# keep a unit per source (libllama's model graphs are unity files upstream already).
UNITY_TARGETS = (*LIGHT_TARGETS, "server-context")
# Sources compiled alone: json.cpp specialises a template after the sources before it in
# its unit use it, mtmd-helper refuses to see mtmd's internal headers, and the slot loop
# keeps the unit its speed was measured with.
ALONE_SOURCES = (("llama-common", "common/json.cpp"), ("mtmd", "tools/mtmd/mtmd-helper.cpp"),
                 ("mtmd", "tools/mtmd/mtmd-helper-gen.cpp"),
                 ("server-context", "tools/server/server-context.cpp"))
_ALONE = "".join(
    f"    if(TARGET {target})\n"
    f"      set_property(SOURCE ${{CMAKE_SOURCE_DIR}}/{source} TARGET_DIRECTORY {target}\n"
    f"        PROPERTY SKIP_UNITY_BUILD_INCLUSION ON)\n"
    f"    endif()\n" for target, source in ALONE_SOURCES)
LIGHT_CMAKE = f"""\
if(PROJECT_NAME STREQUAL "llama.cpp" AND CMAKE_VERSION VERSION_GREATER_EQUAL 3.19)
  cmake_language(DEFER CALL cmake_language EVAL CODE [[
    foreach(target {' '.join(LIGHT_TARGETS)})
      if(TARGET ${{target}})
        set_property(TARGET ${{target}} APPEND PROPERTY COMPILE_OPTIONS -O1)
      endif()
    endforeach()
    foreach(target {' '.join(UNITY_TARGETS)})
      if(TARGET ${{target}})
        set_property(TARGET ${{target}} PROPERTY UNITY_BUILD ON)
      endif()
    endforeach()
{_ALONE}  ]])
endif()
"""
STEP = re.compile(r"^\[(\d+)/(\d+)\]")
ENV_BINARY = "LLMOP_LLAMA_SERVER"  # use this llama-server instead of the cached build
ENV_CACHE = "LLMOP_CACHE"

Progress = Callable[[int, int], None]


class BuildError(RuntimeError):
    """llama-server cannot be built here; the message says what to install or where the log is."""


def cmake_flags(machine: str) -> tuple[str, ...]:
    """The CMake options for a CPU architecture (``platform.machine()``)."""
    return COMMON_FLAGS + (X86_64_FLAGS if machine in ("x86_64", "AMD64") else ())


def build_key(machine: str) -> str:
    """Changes whenever the source or the options change: a new key is a new build."""
    text = "\0".join((SOURCE_PACKAGE, SOURCE_VERSION, machine, *cmake_flags(machine),
                      LIGHT_CMAKE))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_root(env: Mapping[str, str] | None = None) -> Path:
    """The project's build cache (``$LLMOP_CACHE``): llama-server here, image layers too."""
    env = os.environ if env is None else env
    return Path(env.get(ENV_CACHE) or Path.home() / ".cache" / "llm-operator")


def built_path(cache: Path, machine: str | None = None) -> Path:
    """Where this machine's build lives in the cache (whether or not it is there yet)."""
    key = build_key(machine or platform.machine())
    return cache / "llama-server" / key / BINARY


def locate(env: Mapping[str, str] | None = None) -> Path | None:
    """The llama-server to run: ``$LLMOP_LLAMA_SERVER``, else the cached build, else None."""
    env = os.environ if env is None else env
    chosen = env.get(ENV_BINARY)
    if chosen:
        return Path(chosen)
    path = built_path(cache_root(env))
    return path if path.is_file() else None


def _tool(name: str) -> str | None:
    """A tool on PATH or beside this Python (the venv's cmake and ninja from PyPI)."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() else shutil.which(name)


def missing_tools() -> str | None:
    """One line naming what to install when the compiler or cmake is missing, else None."""
    missing = [what for what, names in (("a C++ compiler", ("c++", "g++", "clang++")),
                                        ("a C compiler", ("cc", "gcc", "clang")),
                                        ("cmake", ("cmake",)))
               if not any(_tool(n) for n in names)]
    if not missing:
        return None
    return (f"compiling llama-server needs {' and '.join(missing)}: on Debian or Ubuntu "
            "`sudo apt-get install g++ cmake`; on macOS `xcode-select --install` and "
            "`brew install cmake`")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One build per key at a time, across processes (the test suite and `make images`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _run(argv: list[str], log: Path, what: str, progress: Progress | None = None,
         **kwargs: object) -> None:
    """Run one build step into the log; BuildError with the log's last lines if it fails."""
    with log.open("ab") as out:
        out.write(f"--- {what}: {' '.join(argv)}\n".encode())
        out.flush()
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              **kwargs) as proc:  # type: ignore[call-overload]
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                step = STEP.match(line.decode(errors="replace"))
                if step and progress is not None:
                    progress(int(step.group(1)), int(step.group(2)))
            code = proc.wait()
    if code != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise BuildError(f"{what} failed (exit {code}); the whole log: {log}\n{tail}")


def sdist_path(cache: Path) -> Path:
    """Where the pinned sdist is kept once downloaded (a build with new flags reads it)."""
    return cache / "llama-server" / "source" / f"{SOURCE_PACKAGE}-{SOURCE_VERSION}.tar.gz"


def fetch_source(cache: Path | None = None) -> Path:
    """The pinned sdist in the cache, downloaded first if it is not there.

    pip downloads it (PyPI or the configured index); its log is ``download.log`` beside it.
    Only the package itself is refused as a wheel: pip reads the sdist's metadata in an
    isolated build environment, and with ``--no-binary :all:`` it built that environment's
    backends (scikit-build-core, hatchling and theirs) from source too: 87 s on a new
    2-core machine against 22 s with their wheels, all of it before the compile can start.
    """
    path = sdist_path(cache or cache_root())
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="download-", dir=path.parent) as tmp:
        _run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary",
              SOURCE_PACKAGE, f"{SOURCE_PACKAGE}=={SOURCE_VERSION}", "-d", tmp],
             path.parent / "download.log",
             f"downloading the {SOURCE_PACKAGE} {SOURCE_VERSION} sdist (llama.cpp's source)")
        next(Path(tmp).glob("*.tar.gz")).replace(path)  # whole or not at all
    return path


def _source(cache: Path, work: Path) -> Path:
    """llama.cpp's tree from the pinned sdist, unpacked in ``work``."""
    with tarfile.open(fetch_source(cache)) as tar:
        tar.extractall(work, filter="data")
    return next(work.glob("*/vendor/llama.cpp"))


def build(cache: Path | None = None, progress: Progress | None = None,
          jobs: int | None = None) -> Path:
    """The cached llama-server for this machine, compiled first if it is not there.

    ``progress(done, total)`` follows the compile steps. Raises BuildError when a tool is
    missing or a step fails (with the log's tail and path).
    """
    cache = cache or cache_root()
    target = built_path(cache)
    if target.is_file():
        return target
    with _locked(target.parent.with_suffix(".lock")):
        if target.is_file():  # another process built it while this one waited
            return target
        problem = missing_tools()
        if problem is not None:
            raise BuildError(problem)
        target.parent.mkdir(parents=True, exist_ok=True)
        log = target.parent / "build.log"
        log.write_bytes(b"")
        generator = ["-G", "Ninja"] if _tool("ninja") else []
        with tempfile.TemporaryDirectory(prefix="llama-build-", dir=target.parent) as tmp:
            work = Path(tmp)
            source = _source(cache, work)
            build_dir = work / "build"
            cmake = _tool("cmake") or "cmake"
            light = work / "light-targets.cmake"
            light.write_text(LIGHT_CMAKE, encoding="utf-8")
            env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:"
                   f"{os.environ.get('PATH', '')}"}
            _run([cmake, "-S", str(source), "-B", str(build_dir), *generator,
                  *cmake_flags(platform.machine()), f"-DCMAKE_PROJECT_INCLUDE={light}"], log,
                 "configuring (cmake)", env=env)
            _run([cmake, "--build", str(build_dir), "--target", BINARY,
                  f"-j{jobs or os.cpu_count() or 2}"], log, f"compiling {BINARY}", progress,
                 env=env)
            partial = target.with_suffix(".partial")
            shutil.copy2(build_dir / "bin" / BINARY, partial)
            if shutil.which("strip"):
                _run(["strip", str(partial)], log, "strip")
            partial.rename(target)
    return target


class ProgressLines:
    """Compile progress for a terminal (one line redrawn) or a log (a line every 15 s)."""

    def __init__(self, write: Callable[[str], None], tty: bool, every: float = 15.0) -> None:
        self.write, self.tty, self.every = write, tty, every
        self.started = time.monotonic()
        self.shown = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if not self.tty and now - self.shown < self.every and done != total:
            return
        self.shown = now
        text = (f"   compiling llama-server: step {done}/{total} "
                f"({100 * done // max(total, 1)}%, {now - self.started:.0f}s)")
        self.write(f"\r{text}" if self.tty else f"{text}\n")
        if self.tty and done == total:
            self.write("\n")


def build_reporting(out: TextIO) -> Path:
    """:func:`build` with its progress written to ``out`` (a terminal: one line redrawn)."""
    found = locate()
    if found is not None:
        return found
    tty = out.isatty()
    print(f">> compiling llama.cpp's llama-server from {SOURCE_PACKAGE} {SOURCE_VERSION}: "
          "once per machine, about 4 minutes on 2 cores", file=out, flush=True)

    def write(text: str) -> None:
        out.write(text)
        out.flush()

    path = build(progress=ProgressLines(write, tty))
    print(f">> llama-server: {path}", file=out, flush=True)
    return path


def main(argv: list[str] | None = None) -> int:
    """``python -m llm_operator.local.llama_build``: `llmop setup` before it is installed.

    It needs the standard library, pip, and cmake and ninja beside this Python, so `make`
    starts the compile while the rest of the project installs. ``--fetch-source`` only
    downloads the sdist, when this machine has no llama-server yet: `make` does that first,
    alone, so that nothing else downloads beside what the compile waits for.
    """
    parser = argparse.ArgumentParser(prog="python -m llm_operator.local.llama_build",
                                     description="Compile llama-server once per machine.",
                                     allow_abbrev=False)
    parser.add_argument("--fetch-source", action="store_true",
                        help="only download the source, when llama-server is not built yet")
    args = parser.parse_args(argv)
    try:
        if args.fetch_source:
            if locate() is None:
                fetch_source()
            return 0
        print(build_reporting(sys.stderr))
    except BuildError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
