"""Floor, aiohttp's server: the hot path alone (parse, map, forward) with the gateway's client.

    python bench/gateway/floor_aiohttp_http1.py PORT UPSTREAM_URL

What the gateway would cost per request on aiohttp's server with nothing of its own
(bench/gateway/instructions.py --floors counts it beside the gateway).
"""

from __future__ import annotations

import json
import sys

from aiohttp import web

from llm_operator.gateway.upstream.http1 import UpstreamClient

UPSTREAM = sys.argv[2]
HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer sk-bench"}
CLIENT = web.AppKey("client", UpstreamClient)


async def start(app: web.Application) -> None:
    app[CLIENT] = UpstreamClient()


async def proxy(request: web.Request) -> web.Response:
    body = json.loads(await request.read())
    body["model"] = "bench-upstream"
    answer = await request.app[CLIENT].post(UPSTREAM, json.dumps(body).encode(), HEADERS,
                                            connect_timeout=5, total=60)
    return web.Response(body=await answer.read(), status=answer.status,
                        content_type="application/json")


app = web.Application()
app.router.add_post("/v1/chat/completions", proxy)
app.on_startup.append(start)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
