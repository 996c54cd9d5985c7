"""The `llmop up`, `llmop status` and `llmop down` commands: the stack on one machine."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.live import Live

from llm_operator.local import llama_build
from llm_operator.local.display import event_line, view
from llm_operator.local.state import StateDir, alive, default_cache_dir, default_state_dir

if TYPE_CHECKING:
    from llm_operator.local.register import Registration
    from llm_operator.local.runtime import Runtime

DEFAULT_DIR = Path("examples/local")
DETACH_WAIT_SECONDS = 600.0
WIDE = 400  # columns for piped output: no line is cut or wrapped
DOWN_WAIT_SECONDS = 30.0

state_option = click.option(
    "--state-dir", type=click.Path(file_okay=False, path_type=Path), envvar="LLMOP_STATE_DIR",
    default=default_state_dir, show_default="$XDG_STATE_HOME/llmop or ~/.local/state/llmop",
    help="Where the running stack keeps its pid, endpoints, status file and logs "
    "($LLMOP_STATE_DIR).")


def _directory(value: Path | None) -> Path:
    if value is not None:
        return value
    if DEFAULT_DIR.is_dir():
        return DEFAULT_DIR
    raise click.UsageError(f"say which directory of LLMModel YAML to serve (no {DEFAULT_DIR} "
                           "here), e.g. llmop up ./models")


def output_console() -> Console:
    """Rich's console; piped output is not wrapped at 80 columns, so lines stay whole."""
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        return Console(width=WIDE)
    return console


def down_command(state_root: Path) -> str:
    """`llmop down` as this shell can run it.

    The executable's path unless it is on PATH; the state directory unless it is the default.
    """
    llmop = Path(sys.executable).with_name("llmop")
    on_path = shutil.which("llmop")
    if on_path is not None and Path(on_path).resolve() == llmop.resolve():
        program = "llmop"
    else:
        try:
            program = str(llmop.relative_to(Path.cwd()))
        except ValueError:
            program = str(llmop)
    command = [program, "down"]
    if state_root.resolve() != default_state_dir().resolve():
        command += ["--state-dir", str(state_root)]
    return shlex.join(command)


def _log_to_file(state: StateDir, level: str) -> None:
    state.logs.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(state.runtime_log)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


@click.command()
@click.argument("directory", required=False,
                type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              help="Gateway port on 127.0.0.1 (OpenAI-compatible API at /v1; 0 picks one).")
@click.option("--mcp-port", type=click.IntRange(0, 65535), default=3000, show_default=True,
              help="MCP server port on 127.0.0.1 (Streamable HTTP at /mcp; 0 picks one).")
@state_option
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path),
              envvar="LLMOP_CACHE_DIR", default=default_cache_dir,
              show_default="$XDG_CACHE_HOME/llmop/models",
              help="Where model files assembled from Python packages are kept.")
@click.option("--max-queue", type=click.IntRange(0, 10_000), default=8, show_default=True,
              help="Requests that may wait per model while all its slots are busy. At the "
              "bound the client (fairness ID) holding the most is refused with 429 and "
              "Retry-After, never a lighter one.")
@click.option("--llama-server", "llama_server", envvar="LLMOP_LLAMA_SERVER",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The llama-server binary to run [default: the one `llmop setup` "
              "compiles, built first if missing].")
@click.option("-d", "--detach", is_flag=True,
              help="Start in the background, print the table once every model has settled, "
              "and return. Stop it with `llmop down`.")
@click.option("--dry-run", is_flag=True,
              help="Only say what would be served, proxied or left out, and why.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True, help="Level of the log in the state directory.")
@click.option("--register", is_flag=True,
              help="Also publish the models served here into a cluster (as remote LLMModels "
              "pointing at this machine's gateway, kept alive by a Lease; withdrawn on stop). "
              "The gateway then listens on all interfaces.")
@click.option("--kubeconfig", type=click.Path(dir_okay=False, path_type=Path),
              envvar="KUBECONFIG", help="With --register: the cluster [default: $KUBECONFIG].")
@click.option("-n", "--namespace", default="ai-models", show_default=True,
              help="With --register: the namespace to publish into.")
@click.option("--advertise", metavar="HOST",
              help="With --register: the address the cluster's pods reach this machine at.")
def up(directory: Path | None, *, port: int, mcp_port: int, state_dir: Path, cache_dir: Path,
       max_queue: int, llama_server: Path | None, detach: bool, dry_run: bool, log_level: str,
       register: bool, kubeconfig: Path | None, namespace: str, advertise: str | None) -> None:
    """Serve a directory of LLMModel YAML on this machine, no cluster needed.

    Local models (acceleratorVendor cpu, inferenceEngine llamacpp or ollama, modelSource
    type file) each run as a llama-server process with the arguments a cluster's pod gets
    (parallel slots, context, threads, LoRA), restarted with backoff if it crashes.
    llama-server is compiled once per machine (`llmop setup`; about 4 minutes on 2 cores).
    Remote models are proxied when the variable named after their apiKeySecret is set
    (openai-api-key -> OPENAI_API_KEY). One gateway serves every model's OpenAI API, and an
    MCP server publishes each as a tool. Editing, adding or removing a YAML file while it
    runs starts, restarts or stops that model and updates the MCP tools.

    DIRECTORY defaults to examples/local (Gemma 3 270M from PyPI, offline).

    \b
    Examples:
      llmop up                                 serve examples/local until Ctrl-C
      llmop up ./models --port 8080 --detach   in the background; `llmop down` stops it
      OPENAI_API_KEY=sk-... llmop up           the remote example is proxied too
      llmop up --dry-run                       what would run here, and why not the rest
      llmop up --max-queue 32                  let more requests wait per model
      llmop up --register --advertise 10.0.0.7 publish them into the cluster in $KUBECONFIG
    """
    # The runtime (MCP SDK, gateway, uvicorn) loads only for this command: ~1 s of imports.
    from llm_operator.local.listening import StartError  # noqa: PLC0415
    from llm_operator.local.options import Options  # noqa: PLC0415
    from llm_operator.local.runtime import Runtime  # noqa: PLC0415

    folder = _directory(directory).resolve()
    state = StateDir(state_dir.resolve())
    console = output_console()
    if dry_run:
        _dry_run(folder, console)
        return
    registration = _registration(register, kubeconfig, namespace, advertise)
    binary = llama_server or _llama_server_for(folder)
    if detach:
        extra = ["--register", "--kubeconfig", str(kubeconfig), "--namespace", namespace,
                 "--advertise", str(advertise)] if registration else []
        _detach(folder, state, console, ["--port", str(port), "--mcp-port", str(mcp_port),
                                         "--cache-dir", str(cache_dir.resolve()),
                                         "--max-queue", str(max_queue),
                                         *(["--llama-server", str(binary)] if binary else []),
                                         "--log-level", log_level, *extra])
        return
    _log_to_file(state, log_level)
    options = Options(directory=folder, state=state, cache_dir=cache_dir.resolve(),
                      gateway_port=port, mcp_port=mcp_port, max_queue=max_queue,
                      llama_server=binary, register=registration,
                      gateway_host="0.0.0.0" if registration else "127.0.0.1")
    from llm_operator.gateway.upstream.proxies import ProxyError  # noqa: PLC0415

    try:
        asyncio.run(_foreground(Runtime(options), console))
    except StartError as exc:
        raise click.ClickException(str(exc)) from None
    except ProxyError as exc:
        raise click.ClickException(f"unusable proxy setting: {exc}") from None


def _serves_locally(folder: Path) -> bool:
    """Whether any model in the directory would run a llama-server here."""
    from llm_operator.local.entries import read_models  # noqa: PLC0415
    from llm_operator.local.machine import detect  # noqa: PLC0415
    from llm_operator.local.placement import arrange  # noqa: PLC0415
    from llm_operator.mcp_server.sources import DirectoryCache  # noqa: PLC0415

    cache = DirectoryCache(folder)
    cache.refresh()
    models = read_models(cache).models
    return bool(arrange([m for m, _ in models], detect(), os.environ.keys()).served)


def _llama_server_for(folder: Path) -> Path | None:
    """The cached llama-server; compiled first (progress shown) when a model here needs it."""
    found = llama_build.locate()
    if found is not None or not _serves_locally(folder):
        return found
    return _build_llama_server()


def _build_llama_server() -> Path:
    try:
        return llama_build.build_reporting(sys.stderr)
    except llama_build.BuildError as exc:
        raise click.ClickException(str(exc)) from None


@click.command()
@click.option("--print-path", is_flag=True, help="Only print where the binary is (nothing "
              "is compiled; exit 1 if it is not built yet).")
def setup(print_path: bool) -> None:
    """Compile llama.cpp's llama-server for this machine, once (`llmop up` runs it).

    The source is the pinned llama-cpp-python sdist from PyPI, which carries llama.cpp's
    tree; only llama-server is built (no web UI, no TLS). It needs a C++ compiler and cmake,
    takes about 4 minutes on 2 cores, and is cached in ~/.cache/llm-operator/llama-server
    ($LLMOP_CACHE) for every later `llmop up`, `make` run and test. The cluster's
    llama-server image (`make images`) carries the same binary.
    """
    if print_path:
        found = llama_build.locate()
        if found is None:
            raise click.ClickException("llama-server is not built yet: run `llmop setup`")
        click.echo(str(found))
        return
    click.echo(str(_build_llama_server()))


def _registration(register: bool, kubeconfig: Path | None, namespace: str,
                  advertise: str | None) -> Registration | None:
    """--register's settings, checked before anything starts."""
    if not register:
        return None
    if advertise is None:
        raise click.UsageError("--register needs --advertise HOST: the address the cluster's "
                               "pods reach this machine's gateway at")
    if kubeconfig is None:
        raise click.UsageError("--register needs a cluster: --kubeconfig FILE or $KUBECONFIG")
    import socket  # noqa: PLC0415 - only with --register, like the cluster client

    from llm_operator.kube import from_kubeconfig  # noqa: PLC0415
    from llm_operator.local.register import Registration  # noqa: PLC0415
    from llm_operator.render.registration import machine_name  # noqa: PLC0415

    try:
        connection = from_kubeconfig(str(kubeconfig))
    except (OSError, ValueError) as exc:
        raise click.UsageError(f"--kubeconfig {kubeconfig}: {exc}") from None
    return Registration(connection, namespace, advertise, machine_name(socket.gethostname()))


async def _foreground(runtime: Runtime, console: Console) -> None:
    """Run until Ctrl-C or SIGTERM, showing a live table (or event lines when not a tty)."""
    task = asyncio.create_task(runtime.run())
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    try:
        if console.is_terminal:
            with Live(view(runtime.snapshot()), console=console, refresh_per_second=4,
                      transient=False) as live:
                while not task.done():
                    live.update(view(runtime.snapshot()))
                    await asyncio.wait({task}, timeout=0.25)
        else:
            await _print_events(runtime, task, console)
        console.print("stopping..." if task.cancelled() else "")
        await task
    except asyncio.CancelledError:
        console.print("stopped: every model process has exited")
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


async def _print_events(runtime: Runtime, task: asyncio.Task[None], console: Console) -> None:
    """Plain output: one line per change, and the table whenever the stack settles."""
    seen: dict[str, tuple[str, int, str]] = {}
    shown: Any = None
    while not task.done():
        snap = runtime.snapshot()
        for row in snap["models"]:
            mark = (row["phase"], row["restarts"], row["detail"] if row["phase"] != "Downloading"
                    else "")
            if seen.get(row["name"]) != mark:
                seen[row["name"]] = mark
                console.print(event_line(row), markup=False, highlight=False)
        rows = [(r["name"], r["phase"]) for r in snap["models"]]
        if snap["settled"] and shown != (rows, snap["problems"]):
            shown = (rows, snap["problems"])
            console.print(view(snap))
        await asyncio.wait({task}, timeout=0.25)


def _dry_run(folder: Path, console: Console) -> None:
    from llm_operator.local.entries import read_models  # noqa: PLC0415
    from llm_operator.local.machine import detect  # noqa: PLC0415
    from llm_operator.local.placement import LocalServe, RemoteProxy, arrange  # noqa: PLC0415
    from llm_operator.mcp_server.sources import DirectoryCache  # noqa: PLC0415

    cache = DirectoryCache(folder)
    cache.refresh()
    models, problems, _ = read_models(cache)
    for line in problems:
        console.print(f"[red]problem[/] {line}", highlight=False)
    machine = detect()
    console.print(f"This machine: {machine.cpus} CPUs, {machine.memory_gib:.1f} GiB RAM, "
                  f"accelerators: {', '.join(sorted(machine.accelerators)) or 'none'}")
    for decision in arrange([m for m, _ in models], machine, os.environ.keys()).decisions:
        name = decision.model.name
        if isinstance(decision, LocalServe):
            ignored = f"; ignored here: {', '.join(decision.ignored)}" \
                if decision.ignored else ""
            args = shlex.join(decision.server_args("MODEL.gguf", 0)[8:])  # after file, port
            console.print(f"[green]serve[/]   {name}: llama-server, ~{decision.estimated_gib} "
                          f"GiB RAM, {args}{ignored}", highlight=False)
        elif isinstance(decision, RemoteProxy):
            console.print(f"[green]proxy[/]   {name}: key from ${decision.key_env}",
                          highlight=False)
        else:
            console.print(f"[dim]{decision.kind}[/] {name}: {decision.reason}", highlight=False)


def _detach(folder: Path, state: StateDir, console: Console, args: list[str]) -> None:
    """Start `llmop up` in its own session and wait until its models have settled."""
    running = state.read()
    if running is not None:
        raise click.ClickException(f"llmop up is already running (pid {running['pid']}); "
                                   "`llmop down` stops it")
    state.logs.mkdir(parents=True, exist_ok=True)
    state.clear()
    out_path = state.logs / "up.console.log"
    argv = [sys.executable, "-m", "llm_operator", "up", str(folder), "--state-dir",
            str(state.root), *args]
    with out_path.open("ab") as out:
        offset = out.tell()  # what earlier runs left in the log is not this run's cause
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + DETACH_WAIT_SECONDS
    snap: dict[str, Any] | None = None
    with console.status("starting models..."):
        while time.monotonic() < deadline:
            if child.poll() is not None:
                raise click.ClickException(_start_failure(out_path, offset))
            snap = state.read()
            if snap is not None and snap.get("settled"):
                break
            time.sleep(0.2)
    if snap is None or not snap.get("settled"):
        raise click.ClickException(f"models not settled after {DETACH_WAIT_SECONDS:.0f}s; "
                                   f"see {state.logs} (still running: `llmop down` stops it)")
    console.print(view(snap, stop=down_command(state.root)))


def _start_failure(out_path: Path, offset: int) -> str:
    """Why a detached `llmop up` exited: its error first, then where the rest is."""
    with out_path.open("rb") as log_file:
        log_file.seek(offset)
        lines = log_file.read().decode(errors="replace").splitlines()
    errors = [line.removeprefix("Error: ") for line in lines if line.startswith("Error: ")]
    cause = errors[-1] if errors else "\n".join(lines[-15:]) or "it printed nothing"
    return f"{cause}\n(llmop up exited while starting; its output: {out_path})"


@click.command()
@state_option
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
def status(state_dir: Path, output: str) -> None:
    """Show the models, endpoints and problems of a running `llmop up`.

    Exits 1 when no `llmop up` is running with this state directory.
    """
    snap = StateDir(state_dir.resolve()).read()
    if snap is None:
        raise click.ClickException(f"llmop up is not running (no live state in {state_dir})")
    if output == "json":
        click.echo(json.dumps(snap, indent=2))
        return
    console = output_console()
    console.print(view(snap, stop=down_command(state_dir.resolve())))


@click.command()
@state_option
def down(state_dir: Path) -> None:
    """Stop a running `llmop up` (started with --detach, or in another terminal).

    Sends SIGTERM, waits until it has stopped every model process, and makes sure none is
    left behind.
    """
    state = StateDir(state_dir.resolve())
    snap = state.read()
    if snap is None:
        click.echo(f"llmop up is not running (no live state in {state_dir})")
        return
    pid = int(snap["pid"])
    children = [int(row["pid"]) for row in snap["models"] if row.get("pid")]
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + DOWN_WAIT_SECONDS
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(pid):
        click.echo(f"llmop up (pid {pid}) did not stop in {DOWN_WAIT_SECONDS:.0f}s; killing it")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    leftovers = [c for c in children if alive(c) and _is_model_server(c)]
    for child in leftovers:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child, signal.SIGKILL)
    state.clear()
    click.echo(f"stopped llmop up (pid {pid}) and {len(children)} model process(es)")


def _is_model_server(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"llm_operator.local.engine" in cmdline

