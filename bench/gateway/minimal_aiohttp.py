"""Stack floor, aiohttp: the gateway's hot path and nothing else (parse, map, forward)."""

from __future__ import annotations

import json
import sys

import aiohttp
from aiohttp import web

UPSTREAM = sys.argv[2]


async def start(app: web.Application) -> None:
    app["session"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))


async def proxy(request: web.Request) -> web.Response:
    body = json.loads(await request.read())
    body["model"] = "bench-upstream"
    async with request.app["session"].post(UPSTREAM, data=json.dumps(body).encode(),
                                           headers={"Content-Type": "application/json"}) as r:
        return web.Response(body=await r.read(), status=r.status,
                            content_type="application/json")


app = web.Application()
app.router.add_post("/v1/chat/completions", proxy)
app.on_startup.append(start)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
