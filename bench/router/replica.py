"""A simulated inference replica with a prefix cache: fast when it has seen the prompt's start.

An engine with a prefix cache (vLLM's automatic prefix caching) skips the prefill of a prompt
prefix it computed before. This stand-in keeps the last ``--cache`` prefixes (LRU); a request
whose system prompt is cached starts after ``--hit-ms``, otherwise after ``--miss-ms`` per
1,000 prompt characters. ``--slots`` requests run at once; the rest wait in its queue, as
`vllm:num_requests_waiting` reports on /metrics. Answers stream ``--tokens`` chunks.

    python bench/router/replica.py --port 9101 [--cache 8] [--slots 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import OrderedDict

from aiohttp import web


class Replica:
    def __init__(self, cache: int, slots: int, *, hit_ms: float, miss_ms: float,
                 token_ms: float, tokens: int) -> None:
        self.cache: OrderedDict[str, None] = OrderedDict()
        self.capacity = cache
        self.slots = asyncio.Semaphore(slots)
        self.hit_ms, self.miss_ms, self.token_ms, self.tokens = hit_ms, miss_ms, token_ms, tokens
        self.waiting = self.running = self.hits = self.misses = 0

    def _prefill_ms(self, prefix: str) -> float:
        if prefix in self.cache:
            self.cache.move_to_end(prefix)
            self.hits += 1
            return self.hit_ms
        self.misses += 1
        self.cache[prefix] = None
        if len(self.cache) > self.capacity:
            self.cache.popitem(last=False)
        return self.miss_ms * max(1.0, len(prefix) / 1000)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        messages = body.get("messages") or []
        prefix = json.dumps(messages[:-1])  # everything before the newest user turn
        self.waiting += 1
        async with self.slots:
            self.waiting -= 1
            self.running += 1
            try:
                await asyncio.sleep(self._prefill_ms(prefix) / 1000)
                out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await out.prepare(request)
                for i in range(self.tokens):
                    chunk = {"id": "c", "object": "chat.completion.chunk",
                             "model": body.get("model"),
                             "choices": [{"index": 0, "delta": {"content": f"t{i} "}}]}
                    await out.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    await asyncio.sleep(self.token_ms / 1000)
                await out.write(b"data: [DONE]\n\n")
                await out.write_eof()
                return out
            finally:
                self.running -= 1

    async def metrics(self, _: web.Request) -> web.Response:
        return web.Response(text=(
            "# TYPE vllm:num_requests_waiting gauge\n"
            f"vllm:num_requests_waiting {self.waiting}\n"
            "# TYPE vllm:num_requests_running gauge\n"
            f"vllm:num_requests_running {self.running}\n"
            "# TYPE llmop_bench_prefix_hits counter\n"
            f"llmop_bench_prefix_hits {self.hits}\n"
            "# TYPE llmop_bench_prefix_misses counter\n"
            f"llmop_bench_prefix_misses {self.misses}\n"))

    async def reset(self, _: web.Request) -> web.Response:
        self.cache.clear()
        self.hits = self.misses = 0
        return web.json_response({"reset": True})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--cache", type=int, default=8, help="prefixes kept (LRU)")
    parser.add_argument("--slots", type=int, default=4, help="requests run at once")
    parser.add_argument("--hit-ms", type=float, default=15.0)
    parser.add_argument("--miss-ms", type=float, default=120.0, help="per 1,000 characters")
    parser.add_argument("--token-ms", type=float, default=5.0)
    parser.add_argument("--tokens", type=int, default=8)
    args = parser.parse_args()
    replica = Replica(args.cache, args.slots, hit_ms=args.hit_ms, miss_ms=args.miss_ms,
                      token_ms=args.token_ms, tokens=args.tokens)
    app = web.Application()
    app.router.add_post("/v1/chat/completions", replica.chat)
    app.router.add_get("/metrics", replica.metrics)
    app.router.add_post("/reset", replica.reset)
    web.run_app(app, host=args.host, port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
