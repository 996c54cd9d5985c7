"""Web console benchmark: a page of 100 models, and the gateway's throughput with it open.

Run from the repository root with the project's virtualenv (needs `wrk`, and for the
browser figures Debian's chromium and chromium-driver):

    .venv/bin/python bench/console/run.py [--rounds 3] [--duration 8]

1. **The models page with 100 models**: the server's time to render it (median of 50), and
   in headless Chromium the time from navigation to the page loaded, scripts included
   (median of 10 loads).
2. **Throughput with the console open vs closed**: the gateway (bench/console/serve.py:
   `llmop gateway`'s Gateway with the console's routes over 100 models) on CPU 0, the fake
   upstream and wrk (50 connections) on CPU 1, in rounds that alternate closed (the
   console not reading: no page asked for in its idle time) and open (a visitor's page:
   the models table and the model's series every 3 s, as console.js asks, and the page
   itself every 9 s). Ratio of the medians.

Prints Markdown tables; docs/benchmarks.md quotes them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
IDLE_SECONDS = 5  # the bench's console stops reading this long after the last page


sys.path.insert(0, str(HERE.parent))
from script_module import load_script  # noqa: E402

gateway_bench = load_script("gateway_bench", HERE.parent / "gateway" / "run.py")
serving = load_script("console_serve", HERE / "serve.py")
LOAD_CPU, PROXY_CPU = gateway_bench.LOAD_CPU, gateway_bench.PROXY_CPU
free_port, pinned, wait_ready, wrk = (gateway_bench.free_port, gateway_bench.pinned,
                                      gateway_bench.wait_ready, gateway_bench.wrk)

from llm_operator.console.pages import Console  # noqa: E402
from llm_operator.gateway.telemetry.metrics import GatewayMetrics  # noqa: E402


def render_ms(samples: int = 50) -> float:
    """Median milliseconds to render /ui/models with 100 models, in this process."""
    metrics = GatewayMetrics()
    console = Console(serving.Hundred(serving.hundred("bench")), metrics.registry,
                      gateway_url=lambda: "x", where="bench")

    class Asked:
        cookies: dict[str, str] = {}
        headers: dict[str, str] = {}

    async def main() -> list[float]:
        took = []
        for _ in range(samples + 5):
            began = time.perf_counter()
            await console.models_page(Asked())  # type: ignore[arg-type]
            took.append((time.perf_counter() - began) * 1000)
        await console.close()
        return took[5:]
    return statistics.median(asyncio.run(main()))


def browser_ms(url: str, loads: int = 10) -> tuple[float, float]:
    """Median ms from navigation to DOMContentLoaded and to load, in headless Chromium."""
    from selenium import webdriver  # noqa: PLC0415

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(options=opts,
                              service=webdriver.ChromeService("/usr/bin/chromedriver"))
    ready, loaded = [], []
    try:
        driver.get(url)  # warm: the browser's own start
        for _ in range(loads):
            driver.get(url)
            timing = driver.execute_script(
                "const t = performance.getEntriesByType('navigation')[0];"
                "return [t.domContentLoadedEventEnd, t.loadEventEnd];")
            ready.append(float(timing[0]))
            loaded.append(float(timing[1]))
    finally:
        driver.quit()
    return statistics.median(ready), statistics.median(loaded)


@contextlib.contextmanager
def started(argv: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE)
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(10)


def visitor(base: str, stop: threading.Event) -> None:
    """What an open models page and a model's page ask for, until ``stop``."""
    async def main() -> None:
        async with aiohttp.ClientSession() as session:
            tick = 0
            while not stop.is_set():
                paths = ["/ui/models/rows", "/ui/api/series?route=bench"]
                if tick % 3 == 0:
                    paths.append("/ui/models")
                for path in paths:
                    async with session.get(base + path) as resp:
                        await resp.read()
                tick += 1
                await asyncio.sleep(3)
    asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=int, default=8)
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args()
    # this process (the visitor's requests, the browser) on the load's CPU, not the gateway's
    os.sched_setaffinity(0, {int(LOAD_CPU)})

    up_port, gw_port = free_port(), free_port()
    workdir = Path(tempfile.mkdtemp(prefix="llmop-bench-console-"))
    config = workdir / "gateway.json"
    config.write_text(json.dumps({"listen": {"host": "127.0.0.1", "port": gw_port},
                                  "routes": [{"name": "bench", "models": ["bench"],
                                              "upstream": {"baseUrl":
                                                           f"http://127.0.0.1:{up_port}/v1",
                                                           "model": "bench-upstream"}}]}))
    rendered = render_ms()
    closed: list[float] = []
    opened: list[float] = []
    with started(pinned(LOAD_CPU, [sys.executable, str(HERE.parent / "gateway" / "upstream.py"),
                                   str(up_port), "0"])), \
            started(pinned(PROXY_CPU, [sys.executable, str(HERE / "serve.py"), str(config),
                                       str(gw_port), str(IDLE_SECONDS)])):
        url = f"http://127.0.0.1:{gw_port}/v1/chat/completions"
        wait_ready(url, 30)
        base = f"http://127.0.0.1:{gw_port}"
        loaded = None if args.no_browser else browser_ms(f"{base}/ui/models")
        wrk(url, 50, 2)  # warm-up
        for index in range(args.rounds):  # closed first, then open first: no order favoured
            for state in (("closed", "open") if index % 2 == 0 else ("open", "closed")):
                if state == "closed":
                    time.sleep(IDLE_SECONDS + 3)  # the console has stopped reading
                    closed.append(wrk(url, 50, args.duration)["rps"])
                    continue
                stop = threading.Event()
                looking = threading.Thread(target=visitor, args=(base, stop))
                looking.start()
                try:
                    time.sleep(1)  # the page is open: the console reads
                    opened.append(wrk(url, 50, args.duration)["rps"])
                finally:
                    stop.set()
                    looking.join()
    print("\n| the models page, 100 models | median |\n|---|---|")
    print(f"| rendered by the server | {rendered:.1f} ms |")
    if loaded is not None:
        print(f"| in headless Chromium: DOMContentLoaded / load | {loaded[0]:.0f} / "
              f"{loaded[1]:.0f} ms |")
    ratio = statistics.median(opened) / statistics.median(closed)
    print("\n| gateway, wrk -c50, 0 ms upstream | req/s (median of "
          f"{args.rounds}) | rounds |\n|---|---|---|")
    print(f"| console closed (baseline) | {statistics.median(closed):,.0f} | "
          f"{', '.join(f'{r:,.0f}' for r in closed)} |")
    print(f"| console open | {statistics.median(opened):,.0f} | "
          f"{', '.join(f'{r:,.0f}' for r in opened)} |")
    print(f"\nopen / closed: **{ratio:.3f}x**")


if __name__ == "__main__":
    main()
