"""Stack floor, Starlette on uvicorn with httpx: the same hot path as minimal_aiohttp.py."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

UPSTREAM = sys.argv[2]
clients: list[httpx.AsyncClient] = []


@asynccontextmanager
async def lifespan(_: Starlette) -> AsyncIterator[None]:
    clients.append(httpx.AsyncClient(limits=httpx.Limits(max_connections=None,
                                                         max_keepalive_connections=1000)))
    yield
    await clients[0].aclose()


async def proxy(request: Request) -> Response:
    client = clients[0]
    body = json.loads(await request.body())
    body["model"] = "bench-upstream"
    r = await client.post(UPSTREAM, content=json.dumps(body).encode(),
                          headers={"Content-Type": "application/json"})
    return Response(r.content, status_code=r.status_code, media_type="application/json")


app = Starlette(routes=[Route("/v1/chat/completions", proxy, methods=["POST"])],
                lifespan=lifespan)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning",
            access_log=False)
