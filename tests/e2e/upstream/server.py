"""A fake OpenAI-compatible provider for the e2e suite, run as a pod in the test cluster.

It answers /v1/chat/completions and /v1/completions only for the key in $UPSTREAM_KEY
(401 otherwise, as a provider would), and says in its answer which key suffix it saw and
how many requests it has had, so a test can tell the gateway injected the Secret's key.
"""

import json
import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KEY = os.environ["UPSTREAM_KEY"]
seen = {"requests": 0}


class Provider(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.headers.get("Authorization") != f"Bearer {KEY}":
            self._send(401, {"error": {"message": "Incorrect API key provided",
                                       "type": "invalid_request_error"}})
            return
        seen["requests"] += 1
        text = f"key ...{KEY[-4:]}, request {seen['requests']}"
        usage = {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}
        if self.path.endswith("/chat/completions"):
            choice = {"index": 0, "finish_reason": "stop",
                      "message": {"role": "assistant", "content": text}}
            kind = "chat.completion"
        else:
            choice = {"index": 0, "finish_reason": "stop", "text": text}
            kind = "text_completion"
        self._send(200, {"id": "fake-1", "object": kind, "created": 1,
                         "model": body.get("model", ""), "choices": [choice], "usage": usage})

    def _send(self, status: int, payload: dict[str, object]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


# As PID 1 the server would ignore SIGTERM and hold its pod for the whole grace period (30 s):
# the scheduler's preemption of it for a model's pod waited that long.
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
ThreadingHTTPServer(("0.0.0.0", 8080), Provider).serve_forever()
