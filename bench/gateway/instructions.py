"""Instructions per proxied request, counted by callgrind: what the request path costs.

Run from the repository root with the project's virtualenv (needs Debian's valgrind):

    .venv/bin/python bench/gateway/instructions.py [--requests 500] [--floors]
        [--python /usr/bin/python3.11] [REV ...]

Seconds on a shared 2-core machine move by ±15 % between runs; instructions do not (the
same tree gives the same count to 0.2 %, whatever else runs). Each tree (REVs checked out
into worktrees, default ``8c0a945``, before flow control and traces, and ``fdc4eb9``,
before the request path's parts, and the working tree) serves ``llmop gateway`` under
``valgrind --tool=callgrind`` with collection off; a client sends 50 requests to warm it,
collection is switched on for ``--requests`` sequential keep-alive requests and off again.
Flow control is measured on (the default) and off; a tree whose config has no
``flowControl`` is measured without it. ``--floors`` adds the hot path alone on aiohttp's
server, on a front of our own that parses with httptools and answers with aiohttp's
response objects, and on a bare one (floor_*_http1.py).
``--python`` counts every tree and floor again served by another interpreter (trees.py).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from run import REPO, interpreter, started, wait_ready
from run import free_port as port
from trees import WORKING, served, worktree

HERE = Path(__file__).resolve().parent
BASELINES = ("8c0a945", "fdc4eb9")
FLOORS = ("floor_aiohttp_http1.py", "floor_front_http1.py", "floor_raw_http1.py")
BODY = json.dumps({"model": "bench", "max_tokens": 16,
                   "messages": [{"role": "user", "content": "Say hello in five words."}]})


def send(gateway_port: int, requests: int) -> None:
    """``requests`` sequential POSTs on one keep-alive connection, as wrk -c1 sends them."""
    connection = http.client.HTTPConnection("127.0.0.1", gateway_port, timeout=60)
    for _ in range(requests):
        connection.request("POST", "/v1/chat/completions", BODY,
                           {"Content-Type": "application/json"})
        answer = connection.getresponse()
        answer.read()
        assert answer.status == 200, answer.status
    connection.close()


def counted(tree: Path, up_port: int, requests: int, flow: bool | None,
            python: str | None = None) -> float:
    """Millions of instructions per request of ``tree``'s gateway.

    ``flow``: flow control on or off; None where it is not a setting of that tree.
    ``python``: the interpreter serving it (None: this virtualenv's).
    """
    gw_port = port()
    work = Path(tempfile.mkdtemp(prefix="llmop-instr-"))
    config = {"listen": {"host": "127.0.0.1", "port": gw_port},
              "routes": [{"models": ["bench"], "upstream": {
                  "baseUrl": f"http://127.0.0.1:{up_port}/v1", "model": "bench-upstream",
                  "apiKey": {"env": "BENCH_KEY"}}}]}
    if flow is not None:
        config["flowControl"] = {"enabled": flow}
    (work / "gateway.yaml").write_text(json.dumps(config))
    return _instructions(["-m", "llm_operator", "gateway", "--config",
                          str(work / "gateway.yaml"), "--log-level", "warning"],
                         tree, gw_port, requests, work, python=python)


def counted_floor(script: Path, up_port: int, requests: int, python: str | None = None
                  ) -> float:
    """Millions of instructions per request of a floor (``script PORT UPSTREAM_URL``)."""
    gw_port = port()
    work = Path(tempfile.mkdtemp(prefix="llmop-instr-"))
    return _instructions([str(script), str(gw_port),
                          f"http://127.0.0.1:{up_port}/v1/chat/completions"],
                         REPO, gw_port, requests, work, python=python)


def _instructions(args: list[str], tree: Path, gw_port: int, requests: int, work: Path, *,
                  python: str | None) -> float:
    """``python args`` under callgrind, counted over ``requests`` after 50 to warm it."""
    out = work / "callgrind.out"
    executable, env = interpreter(python, tree / "src")
    argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
            f"--callgrind-out-file={out}", executable, *args]
    url = f"http://127.0.0.1:{gw_port}/v1/chat/completions"
    with started(argv, {"BENCH_KEY": "sk-bench", **env}) as proc:
        wait_ready(url, 300)  # Python under valgrind starts slowly
        send(gw_port, 50)
        control = ["callgrind_control"]
        subprocess.run([*control, "-i", "on", str(proc.pid)], check=True,
                       capture_output=True)
        send(gw_port, requests)
        subprocess.run([*control, "-i", "off", str(proc.pid)], check=True,
                       capture_output=True)
        subprocess.run([*control, "-d", str(proc.pid)], check=True, capture_output=True)
    total = 0
    for dump in work.glob("callgrind.out*"):
        for line in dump.read_text(errors="replace").splitlines():
            if line.startswith("totals:"):  # (its "summary:" line says 0 with collection off)
                total += int(line.split()[1])
                break
    return total / requests / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("revs", nargs="*", default=list(BASELINES))
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--floors", action="store_true", help="also count the hot path alone "
                        "on aiohttp's server, on an httptools front answering with aiohttp's "
                        "responses, and on a bare asyncio+httptools one (floor_*_http1.py): "
                        "what the server library costs")
    parser.add_argument("--python", action="append", default=[], help="also count every "
                        "tree and floor served by this Python and this virtualenv's packages "
                        "(e.g. /usr/bin/python3.11, which the router image ships). Repeatable")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="llmop-trees-"))
    trees = {rev: worktree(rev, work) for rev in args.revs}
    trees[WORKING] = REPO
    up_port = port()
    rows = []
    try:
        with started([sys.executable, str(HERE / "upstream.py"), str(up_port), "0"]):
            wait_ready(f"http://127.0.0.1:{up_port}/v1/chat/completions", 10)
            for python in [None, *args.python]:
                for name, tree in trees.items():
                    knows_flow = any(  # the config module, where each tree keeps it
                        "flow_control" in path.read_text() for path in (
                            tree / "src/llm_operator/gateway/settings/config.py",
                            tree / "src/llm_operator/gateway/config.py") if path.exists())
                    on = counted(tree, up_port, args.requests, True, python) \
                        if knows_flow else None
                    off = counted(tree, up_port, args.requests,
                                  False if knows_flow else None, python)
                    rows.append((served(name, python), on, off))
                    print(f"{rows[-1][0]}: flow control on {on}, off {off}", flush=True)
                for floor in FLOORS if args.floors else ():
                    rows.append((served(floor, python), None,
                                 counted_floor(HERE / floor, up_port, args.requests, python)))
                    print(f"{rows[-1][0]}: {rows[-1][2]}", flush=True)
    finally:
        for rev in args.revs:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                            str(work / rev)], check=False)
    print(f"\nMillions of instructions per proxied request (callgrind), {args.requests} "
          f"sequential requests, fake upstream, one route mapping the model name; "
          f"{os.cpu_count()} CPUs.\n")
    print("| tree | flow control on (the default) | flow control off |\n|---|---|---|")
    for name, on, off in rows:
        print(f"| {name} | {'-' if on is None else f'{on:.3f}'} | {off:.3f} |")


if __name__ == "__main__":
    main()
