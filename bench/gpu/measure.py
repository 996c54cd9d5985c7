"""Start llama-server per case, read the card's memory loaded and after full contexts (stdlib).

    python measure.py --cases cases.json --server build/bin/llama-server \
        --models DIR --out results.jsonl [--only ID ...] [--deadline EPOCH]

Each case of cases.json (written by cases.py from `llmop render`'s own arguments) names a
model file and llama-server's arguments with ``{model}``, ``{host}`` and ``{port}`` left to
fill. For each: the card's memory before, the server process's memory once /health answers,
then one full-context request per slot at once (token ids, so the made-up vocabulary never
matters) with the card sampled every 0.1 s, and the buffers llama.cpp's log reports. A case
with ``tokens_per_second`` also times 256-token generations at concurrency 1 and 8.
One JSON line per case, written as soon as it is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

BUFFER = re.compile(r"(\S+) (model|KV|compute|output|RS) buffer size =\s+([\d.]+) MiB")
PORT = 18080


def smi(query: str) -> str | None:
    """nvidia-smi's answer to one ``--query-...=`` option as CSV, or None without it."""
    try:
        return subprocess.run(["nvidia-smi", query, "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def gpu_used_mib() -> int | None:
    """The whole card's used memory (MiB), or None without nvidia-smi."""
    out = smi("--query-gpu=memory.used")
    return int(out.split()[0]) if out else None


def process_mib(pid: int) -> int | None:
    """What nvidia-smi charges to one process (MiB)."""
    out = smi("--query-compute-apps=pid,used_memory")
    if out is None:
        return None
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0] == str(pid):
            return int(parts[1])
    return None


class Peak:
    """The card's highest used memory while a block runs, sampled every 0.1 s."""

    def __init__(self) -> None:
        self.peak: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            used = gpu_used_mib()
            if used is not None:
                self.peak = max(self.peak or 0, used)
            self._stop.wait(0.1)

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def post(port: int, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/completion",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        result: dict[str, Any] = json.load(resp)
        return result


def wait_healthy(port: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama-server exited {proc.returncode} while loading")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"llama-server not healthy after {timeout:.0f}s")


def ids(n: int, vocab: int, rng: random.Random) -> list[int]:
    return [rng.randrange(259, vocab) for _ in range(n)]


def full_contexts(port: int, case: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """One request per slot at once, each filling its slot's context."""
    n = case["context_per_slot"] - 8
    bodies = [{"prompt": ids(n, case["vocab"], rng), "n_predict": 4, "cache_prompt": False,
               "temperature": 0} for _ in range(case["slots"])]
    started = time.monotonic()
    with ThreadPoolExecutor(len(bodies)) as pool:
        answers = list(pool.map(lambda b: post(port, b, 180), bodies))
    return {"seconds": round(time.monotonic() - started, 2),
            "prompt_tokens": [a.get("timings", {}).get("prompt_n") for a in answers]}


def tokens_per_second(port: int, vocab: int, rng: random.Random) -> dict[str, Any]:
    """256 generated tokens per request, 1 then 8 at once; 2 rounds each, medians."""
    out: dict[str, Any] = {}
    for clients in (1, 8):
        rounds = []
        for _ in range(2):
            bodies = [{"prompt": ids(64, vocab, rng), "n_predict": 256, "ignore_eos": True,
                       "cache_prompt": False, "temperature": 0} for _ in range(clients)]
            started = time.monotonic()
            with ThreadPoolExecutor(clients) as pool:
                answers = list(pool.map(lambda b: post(port, b, 300), bodies))
            wall = time.monotonic() - started
            made = sum(a.get("timings", {}).get("predicted_n", 0) for a in answers)
            each = [a.get("timings", {}).get("predicted_per_second", 0.0) for a in answers]
            rounds.append((made / wall, statistics.median(each)))
        out[f"c{clients}"] = {"aggregate": round(statistics.median(r[0] for r in rounds), 1),
                              "per_request": round(statistics.median(r[1] for r in rounds), 1)}
    return out


def measure(case: dict[str, Any], server: str, models: Path, log_dir: Path) -> dict[str, Any]:
    model = models / case["file"]
    args = [a.format(model=model, host="127.0.0.1", port=PORT) for a in case["args"]]
    args += ["-lv", "4"]  # llama.cpp's buffer sizes and memory breakdown in the log
    log_path = log_dir / f"{case['id']}.log"
    row: dict[str, Any] = {"id": case["id"], "file_bytes": model.stat().st_size,
                           "before_mib": gpu_used_mib()}
    rng = random.Random(case["id"])
    started = time.monotonic()
    with log_path.open("wb") as log:
        proc = subprocess.Popen([server, *args], stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_healthy(PORT, proc, 150)
            row["load_seconds"] = round(time.monotonic() - started, 1)
            row["loaded_card_mib"] = gpu_used_mib()
            row["loaded_process_mib"] = process_mib(proc.pid)
            with Peak() as peak:
                row["full_context"] = full_contexts(PORT, case, rng)
            row["peak_card_mib"] = peak.peak
            row["after_process_mib"] = process_mib(proc.pid)
            row["after_card_mib"] = gpu_used_mib()
            if case.get("tokens_per_second"):
                row["tokens_per_second"] = tokens_per_second(PORT, case["vocab"], rng)
        except Exception as exc:  # the row says what failed; the next case still runs
            row["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    text = log_path.read_text(errors="replace")
    row["buffers_mib"] = [[m[0], m[1], float(m[2])] for m in BUFFER.findall(text)]
    row["breakdown"] = [line.split("|", 1)[-1] for line in text.splitlines()
                        if "memory_breakdown_print" in line]
    row["log_tail"] = text.splitlines()[-6:] if "error" in row else []
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=Path, required=True)
    p.add_argument("--server", required=True)
    p.add_argument("--models", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--only", nargs="*", help="case ids to run (default: all)")
    p.add_argument("--deadline", type=float, default=0.0,
                   help="epoch seconds after which no new case starts")
    a = p.parse_args()
    cases = json.loads(a.cases.read_text())
    for case in cases:
        if a.only and case["id"] not in a.only:
            continue
        if a.deadline and time.time() > a.deadline:
            print(f"skipped {case['id']}: past the deadline", flush=True)
            continue
        if not (a.models / case["file"]).exists():
            print(f"skipped {case['id']}: no {case['file']}", flush=True)
            continue
        row = measure(case, a.server, a.models, a.out.parent)
        with a.out.open("a") as out:
            out.write(json.dumps(row) + "\n")
        print(json.dumps({k: v for k, v in row.items() if k != "buffers_mib"}), flush=True)
    os.sync()


if __name__ == "__main__":
    main()
