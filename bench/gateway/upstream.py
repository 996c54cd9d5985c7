"""A minimal, fast OpenAI-compatible upstream for benchmarks (raw asyncio HTTP/1.1).

Answers every POST with a fixed chat completion, or with an SSE stream of 20 chunks when
the body asks for "stream": true, after an optional fixed latency (a model's generation
time). Keep-alive; no parsing beyond what HTTP needs, so the upstream costs as little CPU as
possible and the proxies are what is measured.

    python upstream.py PORT [LATENCY_MS]
"""

from __future__ import annotations

import asyncio
import json
import sys

BODY = json.dumps({
    "id": "chatcmpl-bench", "object": "chat.completion", "created": 1, "model": "bench",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "Hello from the benchmark."}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 6, "total_tokens": 18},
}).encode()
PLAIN = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
         + str(len(BODY)).encode() + b"\r\n\r\n" + BODY)
EVENT = b'data: {"object":"chat.completion.chunk","choices":[{"delta":{"content":"tok"}}]}\n\n'
STREAM_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n")


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


LATENCY = 0.0


class Upstream(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].lower()
            length = 0
            at = head.find(b"content-length:")
            if at >= 0:
                length = int(head[at + 15:head.find(b"\r\n", at) if head.find(b"\r\n", at) > 0
                                  else None])
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4:end + 4 + length]
            self.buffer = self.buffer[end + 4 + length:]
            if b'"stream":true' in body.replace(b" ", b""):
                events = b"".join(chunk(EVENT) for _ in range(20))
                reply = (STREAM_HEAD + chunk(EVENT) + events + chunk(b"data: [DONE]\n\n")
                         + b"0\r\n\r\n")
            else:
                reply = PLAIN
            if LATENCY:
                asyncio.get_running_loop().call_later(LATENCY, self._write, reply)
            else:
                self.transport.write(reply)

    def _write(self, reply: bytes) -> None:
        if not self.transport.is_closing():
            self.transport.write(reply)


async def main(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Upstream, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    LATENCY = float(sys.argv[2]) / 1000 if len(sys.argv) > 2 else 0.0
    asyncio.run(main(int(sys.argv[1])))
