"""`llmop up`, `llmop status` and `llmop down` as a user runs them (real processes)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from llm_operator.local.state import alive

from localstack import SETTLE_SECONDS, example_dir, exits_within

LLMOP = [sys.executable, "-m", "llm_operator"]


def llmop(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run as a pipe would (no COLUMNS: piped output must not wrap at 80 columns)."""
    environment = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run([*LLMOP, *args], capture_output=True, text=True, check=False,
                          timeout=SETTLE_SECONDS, env={**environment, **(env or {})})


def test_dry_run_says_what_would_run_here_and_why_not_the_rest(tmp_path: Path) -> None:
    result = llmop("up", "--dry-run", str(example_dir(tmp_path / "models")),
                   env={"OPENAI_API_KEY": ""})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("This machine: ")
    assert lines[1].startswith("serve   gemma3-270m: llama-server, ~1.6 GiB RAM, --metrics "
                               "--ctx-size 32768 --threads ")
    assert lines[1].endswith(" --parallel 8 --cache-ram 256 --n-predict 256 --chat-template gemma "
                             "--no-jinja")
    assert lines[2] == "proxy   gpt55-remote: key from $OPENAI_API_KEY"


def test_detach_status_and_down_leave_nothing_running(tmp_path: Path, model_cache: Path
                                                      ) -> None:
    state = str(tmp_path / "state")
    models = str(example_dir(tmp_path / "models"))
    started = llmop("up", models, "--detach", "--port", "0", "--mcp-port", "0", "--state-dir",
                    state, "--cache-dir", str(model_cache))
    assert started.returncode == 0, started.stdout + started.stderr
    assert "gemma3-270m" in started.stdout and "Ready" in started.stdout
    stop = next(line for line in started.stdout.splitlines() if line.startswith("Stop: "))
    shown = llmop("status", "--state-dir", state, "-o", "json")
    snapshot = json.loads(shown.stdout)
    phases = {r["name"]: r["phase"] for r in snapshot["models"]}
    assert phases == {"gemma3-270m": "Ready", "gpt55-remote": "Skipped"}
    pids = [snapshot["pid"], *(r["pid"] for r in snapshot["models"] if r["pid"])]
    assert len(pids) == 2 and all(alive(p) for p in pids)
    again = llmop("up", models, "--detach", "--state-dir", state)
    assert again.returncode == 1
    assert f"llmop up is already running (pid {snapshot['pid']})" in again.stderr
    stopped = subprocess.run(["bash", "-c", stop.removeprefix("Stop: ")], text=True, check=False,
                             capture_output=True, timeout=SETTLE_SECONDS)  # as printed
    assert stopped.stdout.strip() == f"stopped llmop up (pid {snapshot['pid']}) and 1 model " \
        "process(es)"
    assert not any(alive(p) for p in pids)
    gone = llmop("status", "--state-dir", state)
    assert gone.returncode == 1
    assert "llmop up is not running" in gone.stderr
    assert llmop("down", "--state-dir", state).stdout.startswith("llmop up is not running")


async def test_ctrl_c_stops_the_foreground_stack_cleanly(tmp_path: Path, model_cache: Path
                                                         ) -> None:
    state = tmp_path / "state"
    proc = await asyncio.create_subprocess_exec(
        *LLMOP, "up", str(example_dir(tmp_path / "models")), "--port", "0", "--mcp-port", "0",
        "--state-dir", str(state), "--cache-dir", str(model_cache),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "COLUMNS": "200"})
    assert proc.stdout is not None
    seen: list[str] = []
    try:
        async with asyncio.timeout(SETTLE_SECONDS):
            while "Gateway (OpenAI API)" not in "".join(seen):
                line = (await proc.stdout.readline()).decode()
                assert line, "".join(seen)
                seen.append(line)
        snapshot = json.loads((state / "up.json").read_text())
        server = next(r["pid"] for r in snapshot["models"] if r["pid"])
        # a long answer streaming: llama-server then ignores SIGTERM for about a minute
        writer = await _streaming(snapshot["gateway"])
        proc.send_signal(signal.SIGINT)
        gone = await asyncio.to_thread(exits_within, server, 2.0)
        writer.close()
        rest = (await asyncio.wait_for(proc.stdout.read(), 30)).decode()
        assert await proc.wait() == 0, rest
    finally:
        if proc.returncode is None:
            proc.kill()
    out = "".join(seen)
    assert "gemma3-270m: Starting: loading (pid " in out and "gemma3-270m: Ready" in out
    assert "gpt55-remote: Skipped: set OPENAI_API_KEY to proxy it through the gateway" in out
    assert "stopped: every model process has exited" in rest
    assert gone, "llama-server outlived Ctrl-C by more than 2 s"
    assert not (state / "up.json").exists()


async def _streaming(gateway: str) -> asyncio.StreamWriter:
    """A streamed completion of 2000 tokens, read until its first token."""
    host, port = gateway.removeprefix("http://").split("/")[0].split(":")
    body = json.dumps({"model": "gemma-3-270m", "prompt": "Once upon a time", "stream": True,
                       "max_tokens": 2000, "ignore_eos": True}).encode()
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: llmop\r\nContent-Type: "
                 b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    async with asyncio.timeout(30):
        while b"data: {" not in await reader.readline():
            pass
    return writer


def test_model_servers_die_with_llmop_up_even_when_it_is_killed(tmp_path: Path,
                                                                model_cache: Path) -> None:
    state = tmp_path / "state"
    started = llmop("up", str(example_dir(tmp_path / "models")), "--detach", "--port", "0",
                    "--mcp-port", "0", "--state-dir", str(state), "--cache-dir",
                    str(model_cache))
    assert started.returncode == 0, started.stdout + started.stderr
    snapshot = json.loads((state / "up.json").read_text())
    server = next(r["pid"] for r in snapshot["models"] if r["pid"])
    os.kill(snapshot["pid"], signal.SIGKILL)  # no chance to clean up
    assert exits_within(server, 15), "the llama.cpp server outlived llmop up"


def test_a_detached_start_that_fails_says_why_first(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "logs").mkdir(parents=True)
    (state / "logs" / "up.console.log").write_text(  # an earlier run's screen
        " MODEL        MODEL ID      STATUS\n gemma3-270m  gemma-3-270m  Ready\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = llmop("up", str(example_dir(tmp_path / "models")), "--detach", "--port",
                       str(port), "--mcp-port", "0", "--state-dir", str(state))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"Error: cannot listen on 127.0.0.1:{port} for the gateway: Address already in use; "
        "pass --port with a free port (0 picks one)",
        f"(llmop up exited while starting; its output: {state / 'logs' / 'up.console.log'})"]


def test_setup_says_where_llama_server_is_or_that_it_is_not_built(tmp_path: Path) -> None:
    missing = llmop("setup", "--print-path", env={"LLMOP_CACHE": str(tmp_path)})
    assert missing.returncode == 1
    assert "llama-server is not built yet: run `llmop setup`" in missing.stderr
    built = llmop("setup", env={"LLMOP_LLAMA_SERVER": "/opt/llama-server"})
    assert (built.returncode, built.stdout, built.stderr) == (0, "/opt/llama-server\n", "")
