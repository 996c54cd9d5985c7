"""Reading a llama-server: its load from /metrics and /slots, its reason from its log (pure)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from llm_operator.local import llama_build
from llm_operator.local.llama_server import (
    Load,
    Meter,
    failure_reason,
    metric_values,
    slot_counts,
)

METRICS = """\
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 120
llamacpp:requests_processing 2
llamacpp:requests_deferred 3
llamacpp:kv_cache_usage_ratio{slot="all"} 0.25
not a sample line
"""


def _slot(processing: bool, decoded: int | None = None) -> dict[str, Any]:
    slot: dict[str, Any] = {"id": 0, "is_processing": processing}
    if decoded is not None:
        slot["next_token"] = [{"has_next_token": True, "n_decoded": decoded}]
    return slot


def test_metric_lines_become_values_by_name() -> None:
    assert metric_values(METRICS) == {
        "llamacpp:tokens_predicted_total": 120.0, "llamacpp:requests_processing": 2.0,
        "llamacpp:requests_deferred": 3.0, "llamacpp:kv_cache_usage_ratio": 0.25}


@pytest.mark.parametrize(("slots", "counts"), [
    (None, (0, 0, 0)),
    ([], (0, 0, 0)),
    ([_slot(False, 50), _slot(True, 7), _slot(True, 5), _slot(False)], (4, 2, 12)),
    ([_slot(True)], (1, 1, 0)),  # reading its prompt: no token yet
])
def test_slots_say_how_many_are_busy_and_what_they_generated(
        slots: Any, counts: tuple[int, int, int]) -> None:
    assert slot_counts(slots) == counts


def test_the_token_rate_counts_answers_still_streaming() -> None:
    meter = Meter()
    first = meter.sample(10.0, METRICS, [_slot(True, 10), _slot(False)])
    assert first == Load(slots=2, busy=1, waiting=3, tokens_per_second=0.0)
    # one second later: 20 more tokens on the busy slot, nothing finished
    second = meter.sample(11.0, METRICS, [_slot(True, 30), _slot(False)])
    assert second.tokens_per_second == 20.0
    # the answer ends: its 35 tokens move into the counter, 5 of them new
    done = METRICS.replace("predicted_total 120", "predicted_total 155")
    assert meter.sample(12.0, done, [_slot(False, 35), _slot(False)]).tokens_per_second == 5.0
    assert meter.sample(13.0, done, None).tokens_per_second == 0.0


@pytest.mark.parametrize(("log", "reason"), [
    (["--- 2026 start: llama-server --model /m.gguf",
      "gguf_init_from_file_impl: failed to read magic",
      "llama_model_load: error loading model: llama_model_loader: failed to load model from "
      "/m.gguf",
      "srv    load_model: failed to load model, '/m.gguf'",
      "main: exiting due to model loading error"],
     "llama_model_loader: failed to load model from /m.gguf"),
    (["--- start", "error: invalid argument: --chat-format"],
     "error: invalid argument: --chat-format"),
    (["--- start", "error: old run", "--- start again", "main: server is listening"], None),
    (["--- start", "start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 80"],
     "couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 80"),
], ids=["bad GGUF", "bad flag", "only the last start counts", "port taken"])
def test_the_reason_is_llama_servers_own_line_since_the_last_start(
        log: list[str], reason: str | None) -> None:
    assert failure_reason(log) == reason


def test_a_build_is_keyed_by_source_architecture_and_flags() -> None:
    assert "-DGGML_AVX2=ON" in llama_build.cmake_flags("x86_64")
    assert "-DGGML_NATIVE=OFF" not in llama_build.cmake_flags("aarch64")
    assert "-DLLAMA_BUILD_UI=OFF" in llama_build.cmake_flags("aarch64")  # nothing downloaded
    keys = {llama_build.build_key(m) for m in ("x86_64", "aarch64")}
    assert len(keys) == 2


def _configure_shaped_as_llama_cpp(tmp_path: Path) -> dict[str, list[tuple[str, str]]]:
    """LIGHT_CMAKE on a project shaped as llama.cpp's: its own targets (two sources each,
    and the sources kept alone where llama.cpp has them), ggml's kernels in a subproject,
    configured as the build configures them (the venv's cmake, Ninja). Each target's
    objects from build.ninja, with the last -O of their flags (the one GCC uses)."""
    source = tmp_path / "src"
    (source / "ggml").mkdir(parents=True)
    targets = [*llama_build.UNITY_TARGETS, "llama"]
    lines = ['cmake_minimum_required(VERSION 3.19)\nproject("llama.cpp" CXX)\n'
             "add_subdirectory(ggml)\n"]
    for target in targets:
        files = [f"{target}-{i}.cpp" for i in (1, 2)]
        files += [path for owner, path in llama_build.ALONE_SOURCES if owner == target]
        for number, name in enumerate(files):
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            (source / name).write_text(f"static int unit() {{ return {number}; }}\n")
        lines.append(f"add_library({target} STATIC {' '.join(files)})\n")
    (source / "CMakeLists.txt").write_text("".join(lines))
    (source / "ggml" / "CMakeLists.txt").write_text(
        'project("ggml" CXX)\nadd_library(ggml-cpu STATIC ../llama-1.cpp ../llama-2.cpp)\n')
    include = tmp_path / "light.cmake"
    include.write_text(llama_build.LIGHT_CMAKE)
    bin_dir = Path(sys.executable).parent
    subprocess.run([str(bin_dir / "cmake"), "-S", str(source), "-B", str(tmp_path / "b"),
                    "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={bin_dir / 'ninja'}",
                    "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_PROJECT_INCLUDE={include}"],
                   check=True, capture_output=True)
    ninja = (tmp_path / "b" / "build.ninja").read_text()
    objects: dict[str, list[tuple[str, str]]] = {}
    for block in ninja.split("\nbuild ")[1:]:
        head, _, body = block.partition("\n")
        output = head.split(":")[0]
        if "CMakeFiles/" in output and output.endswith(".o"):
            target, _, obj = output.split("CMakeFiles/")[1].partition(".dir/")
            (flags,) = [line.split("=", 1)[1].split() for line in body.splitlines()
                        if line.strip().startswith("FLAGS =")]
            level = [f for f in flags if f.startswith("-O")][-1]
            objects.setdefault(target, []).append((obj, level))
    return objects


def test_only_the_light_targets_compile_at_o1(tmp_path: Path) -> None:
    objects = _configure_shaped_as_llama_cpp(tmp_path)
    levels = {target: {level for _, level in objs} for target, objs in objects.items()}
    assert levels == {**{t: {"-O1"} for t in llama_build.LIGHT_TARGETS},
                      "llama": {"-O3"}, "server-context": {"-O3"}, "ggml-cpu": {"-O3"}}


def test_the_servers_own_targets_compile_as_unity_files_but_the_sources_kept_alone(
        tmp_path: Path) -> None:
    objects = _configure_shaped_as_llama_cpp(tmp_path)
    units = {target: sorted(obj for obj, _ in objs) for target, objs in objects.items()}
    for target in llama_build.UNITY_TARGETS:
        alone = [f"{path}.o" for owner, path in llama_build.ALONE_SOURCES if owner == target]
        assert units[target] == sorted(["Unity/unity_0_cxx.cxx.o", *alone]), target
    # libllama and ggml's kernels: one unit per source, as upstream builds them
    assert units["llama"] == ["llama-1.cpp.o", "llama-2.cpp.o"]
    assert units["ggml-cpu"] == ["__/llama-1.cpp.o", "__/llama-2.cpp.o"]


def test_the_light_targets_are_part_of_the_build_key(monkeypatch: pytest.MonkeyPatch) -> None:
    key = llama_build.build_key("x86_64")
    monkeypatch.setattr(llama_build, "LIGHT_CMAKE", llama_build.LIGHT_CMAKE.replace("-O1", "-O2"))
    assert llama_build.build_key("x86_64") != key


def test_the_binary_is_the_environment_override_else_the_cached_build(tmp_path: Any) -> None:
    chosen = tmp_path / "my-llama-server"
    assert llama_build.locate({"LLMOP_LLAMA_SERVER": str(chosen)}) == chosen
    assert llama_build.locate({"LLMOP_CACHE": str(tmp_path)}) is None
    built = llama_build.built_path(tmp_path)
    built.parent.mkdir(parents=True)
    built.write_bytes(b"")
    assert llama_build.locate({"LLMOP_CACHE": str(tmp_path)}) == built


def test_a_missing_compiler_is_one_line_naming_the_packages(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    problem = llama_build.missing_tools()
    assert problem is not None and "\n" not in problem
    assert problem.startswith("compiling llama-server needs a C++ compiler and a C compiler")
    assert "`sudo apt-get install g++ cmake`" in problem


def test_a_failed_step_shows_the_end_of_its_log_and_where_the_rest_is(tmp_path: Any) -> None:
    log = tmp_path / "build.log"
    with pytest.raises(llama_build.BuildError) as failed:
        llama_build._run(["sh", "-c", "echo first; echo 'fatal: no space'; exit 3"], log,
                         "compiling llama-server")
    message = str(failed.value)
    assert message.startswith(f"compiling llama-server failed (exit 3); the whole log: {log}")
    assert message.endswith("first\nfatal: no space")


def test_the_module_compiles_before_the_project_is_installed_and_says_what_is_missing(
        tmp_path: Any) -> None:
    """`make` starts the compile with the source tree and a bare virtualenv (cmake, ninja):
    the module must import nothing but the standard library, print the binary's path, and
    fail with one line naming what to install."""
    env = {"PATH": str(tmp_path), "LLMOP_CACHE": str(tmp_path / "cache"),
           "PYTHONPATH": str(Path(llama_build.__file__).parents[2])}
    argv = [sys.executable, "-S", "-m", "llm_operator.local.llama_build"]
    missing = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    assert missing.returncode == 1
    assert missing.stderr.splitlines()[-1].startswith(
        "Error: compiling llama-server needs a C++ compiler")
    chosen = tmp_path / "llama-server"
    found = subprocess.run(argv, env={**env, "LLMOP_LLAMA_SERVER": str(chosen)},
                           capture_output=True, text=True, check=True)
    assert found.stdout == f"{chosen}\n"


def test_the_source_is_downloaded_once_into_the_cache_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`make`'s `--fetch-source`, then the build: one download, kept for later builds; a
    download that fails leaves nothing a build would take for the sdist."""
    calls: list[list[str]] = []

    def pip(argv: list[str], log: Path, what: str, *_: object, **__: object) -> None:
        calls.append(argv)
        if len(calls) == 1:
            raise llama_build.BuildError(f"{what} failed (exit 1); the whole log: {log}")
        target = Path(argv[argv.index("-d") + 1])
        (target / f"llama_cpp_python-{llama_build.SOURCE_VERSION}.tar.gz").write_bytes(b"sd")

    monkeypatch.setattr(llama_build, "_run", pip)
    source = tmp_path / "llama-server" / "source"
    with pytest.raises(llama_build.BuildError, match=r"source/download\.log"):
        llama_build.fetch_source(tmp_path)
    assert list(source.iterdir()) == []  # the failed download's directory is gone
    path = llama_build.fetch_source(tmp_path)
    assert path == llama_build.sdist_path(tmp_path) and path.read_bytes() == b"sd"
    assert [p.name for p in source.iterdir()] == [path.name]
    assert llama_build.fetch_source(tmp_path) == path and len(calls) == 2  # cached
    argv = calls[1]
    assert {"--no-deps", f"llama-cpp-python=={llama_build.SOURCE_VERSION}"} <= set(argv)
    # the sdist, never a wheel of it; the backends that read its metadata may come as wheels
    assert argv[argv.index("--no-binary") + 1] == "llama-cpp-python" and ":all:" not in argv
