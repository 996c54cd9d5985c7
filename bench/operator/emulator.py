"""The test suite's Kubernetes emulator as its own process, with a request counter.

    python bench/operator/emulator.py PORT_FILE

Serves on a free loopback port (written to PORT_FILE once listening) until killed.
GET /__stats answers {"writes": n, "reads": n, "PATCH deployments": n, ...}, counted since
the last POST /__stats/reset.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import kmock
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from cluster import Cluster

COUNTS: dict[str, int] = {}


class CountingCluster(Cluster):
    """Counts API requests by kind (reads: GET; writes: everything else)."""

    async def _handle(self, request: Any) -> web.StreamResponse:
        key = "reads" if request.method.value == "GET" else "writes"
        COUNTS[key] = COUNTS.get(key, 0) + 1
        if key == "writes":
            what = f"{request.method.value} {request.resource.plural if request.resource else '?'}"
            what += f"/{request.subresource}" if request.subresource else ""
            COUNTS[what] = COUNTS.get(what, 0) + 1
        return await super()._handle(request)


async def main(port_file: Path) -> None:
    async with CountingCluster() as cluster, kmock.Server(cluster):
        cluster.register_operator_kinds()

        async def stats(_: Any) -> web.Response:
            return web.json_response(COUNTS)

        async def reset(_: Any) -> web.Response:
            COUNTS.clear()
            return web.json_response({})

        side = web.Application()
        side.router.add_get("/__stats", stats)
        side.router.add_post("/__stats/reset", reset)
        runner = web.AppRunner(side, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        stats_port = runner.addresses[0][1]
        port_file.write_text(f"{str(cluster.url).rstrip('/')} http://127.0.0.1:{stats_port}")
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
