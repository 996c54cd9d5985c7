"""A simulated inference replica with a prefix cache: fast when it has seen the prompt's start.

An engine with a prefix cache (vLLM's automatic prefix caching) skips the prefill of the
KV blocks it computed before. This stand-in splits each prompt (the request's messages as
JSON) into 1,000-character blocks, each named by the chain of blocks before it, and keeps the
last ``--cache`` blocks (LRU). A request pays ``--hit-ms`` (its last, partial block) plus
``--miss-ms`` for every whole block it does not find from the start: a conversation's next
turn reuses the blocks of its previous one on the replica that served it. ``--slots``
requests run at once; the rest wait in its queue, as `vllm:num_requests_waiting` reports
on /metrics. Answers stream ``--tokens`` chunks.

``--prefill`` says whether prefills contend for the replica's compute:
- ``serial`` (default): one prefill at a time, in arrival order. A GPU's compute is one
  resource: vLLM's scheduler fills each step's token budget first come, first served, so a
  prompt that fits one step (2,000 tokens here) delays every prefill behind it.
- ``parallel``: every slot prefills on its own, as if each had a GPU; a miss costs only its
  own request. Kinder to routing that misses the cache than any real engine.

    python bench/router/replica.py --port 9101 [--cache 144] [--slots 4] [--prefill serial]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from collections import OrderedDict

from aiohttp import web

BLOCK = 1000  # characters per cached block (--miss-ms is per block)


class Replica:
    def __init__(self, cache: int, slots: int, *, hit_ms: float, miss_ms: float,
                 token_ms: float, tokens: int, prefill: str = "serial") -> None:
        self.cache: OrderedDict[int, None] = OrderedDict()  # block chain -> None, LRU
        self.capacity = cache
        self.slots = asyncio.Semaphore(slots)
        # the compute prefills share: one at a time (asyncio's Lock wakes waiters in order)
        self.compute = asyncio.Lock() if prefill == "serial" else contextlib.nullcontext()
        self.hit_ms, self.miss_ms, self.token_ms, self.tokens = hit_ms, miss_ms, token_ms, tokens
        self.waiting = self.running = self.hits = self.misses = 0

    def _prefill_ms(self, prompt: str) -> float:
        """Whole blocks found from the start are free; the rest are computed and kept."""
        chain: list[int] = []
        for start in range(0, len(prompt) - BLOCK + 1, BLOCK):
            chain.append(hash((chain[-1] if chain else 0, prompt[start:start + BLOCK])))
        found = 0
        while found < len(chain) and chain[found] in self.cache:
            self.cache.move_to_end(chain[found])
            found += 1
        for block in chain[found:]:
            self.cache[block] = None
            if len(self.cache) > self.capacity:
                self.cache.popitem(last=False)
        self.hits += found
        self.misses += len(chain) - found
        return self.hit_ms + self.miss_ms * (len(chain) - found)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        messages = body.get("messages") or []
        prompt = json.dumps(messages)
        self.waiting += 1
        async with self.slots:
            self.waiting -= 1
            self.running += 1
            try:
                async with self.compute:
                    await asyncio.sleep(self._prefill_ms(prompt) / 1000)
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

    async def reset(self, request: web.Request) -> web.Response:
        """Forget the counts, and the cache unless ``?cache=keep`` (after a warm-up)."""
        if request.query.get("cache") != "keep":
            self.cache.clear()
        self.hits = self.misses = 0
        return web.json_response({"reset": True})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--cache", type=int, default=144,
                        help="1,000-character blocks kept (LRU); 144 hold 16 of the bench's "
                        "8,000-character system prompts with their turns")
    parser.add_argument("--slots", type=int, default=4, help="requests run at once")
    parser.add_argument("--hit-ms", type=float, default=15.0)
    parser.add_argument("--miss-ms", type=float, default=120.0,
                        help="per uncached 1,000-character block")
    parser.add_argument("--token-ms", type=float, default=5.0)
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--prefill", choices=["serial", "parallel"], default="serial",
                        help="serial: prefills share the compute, one at a time (a GPU); "
                        "parallel: each slot prefills on its own")
    args = parser.parse_args()
    replica = Replica(args.cache, args.slots, hit_ms=args.hit_ms, miss_ms=args.miss_ms,
                      token_ms=args.token_ms, tokens=args.tokens, prefill=args.prefill)
    app = web.Application()
    app.router.add_post("/v1/chat/completions", replica.chat)
    app.router.add_get("/metrics", replica.metrics)
    app.router.add_post("/reset", replica.reset)
    web.run_app(app, host=args.host, port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
