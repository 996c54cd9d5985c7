"""A batch's input file: checked at upload, then read into requests as OpenAI does (pure).

Upload (``POST /v1/files``, purpose ``batch``) refuses what cannot be a batch file at all,
naming the line or the limit, and stores nothing: over 200 MB or 50,000 requests, not
UTF-8, a line that is not a JSON object. Creating a batch reads the file against the
batch's endpoint: a line naming another endpoint, lacking a field, repeating a
``custom_id`` or naming a model that is not served fails the batch with one error per
line (the batch's ``errors``), as OpenAI's validation does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_BYTES = 200 * 1024 * 1024  # OpenAI's limits for a batch input file
MAX_REQUESTS = 50_000
ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
MAX_ERRORS = 100  # a failed batch lists at most this many line errors


class FileRefused(ValueError):
    """An upload that cannot be a batch file; the message names the line or the limit."""


@dataclass(frozen=True)
class BatchRequest:
    """One line of a batch: its id, where it goes, and the body sent there."""

    line: int  # 1-based, as OpenAI's errors count
    custom_id: str
    url: str
    body: dict[str, Any]

    @property
    def model(self) -> str:
        return str(self.body["model"])


@dataclass(frozen=True)
class LineError:
    """Why one line cannot run, in the shape of OpenAI's batch ``errors.data[]``."""

    code: str
    message: str
    line: int
    param: str | None = None

    def as_openai(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "param": self.param,
                "line": self.line}


def _lines(data: bytes) -> list[tuple[int, str]]:
    """The file's non-blank lines, 1-based; FileRefused when it is not UTF-8 text."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise FileRefused(f"the file is not UTF-8: line {line} has a byte sequence that is "
                          f"not (at byte {exc.start}); save it as UTF-8") from None
    return [(number, line) for number, line in enumerate(text.split("\n"), start=1)
            if line.strip()]


def check_upload(data: bytes) -> int:
    """How many requests a batch file holds; FileRefused naming what is wrong."""
    if len(data) > MAX_BYTES:
        raise FileRefused(f"the file is {len(data)} bytes; a batch file may have at most "
                          f"{MAX_BYTES} bytes ({MAX_BYTES // 2 ** 20} MB)")
    lines = _lines(data)
    if not lines:
        raise FileRefused("the file is empty; a batch file has one JSON request per line")
    if len(lines) > MAX_REQUESTS:
        raise FileRefused(f"the file has {len(lines)} requests; a batch may have at most "
                          f"{MAX_REQUESTS}")
    for number, line in lines:
        try:
            parsed = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise FileRefused(f"line {number} is not JSON ({exc}); a batch file is JSONL: "
                              "one JSON object per line") from None
        if not isinstance(parsed, dict):
            raise FileRefused(f"line {number} is a JSON {type(parsed).__name__}, not an "
                              "object; each line is {\"custom_id\", \"method\", \"url\", "
                              "\"body\"}")
    return len(lines)


def _request(number: int, item: dict[str, Any], endpoint: str,
             served: Callable[[str], bool]) -> BatchRequest | LineError:
    custom_id = item.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return LineError("missing_required_parameter", "each line needs a string "
                         "custom_id", number, "custom_id")
    if item.get("method") != "POST":
        return LineError("invalid_request", f"method must be POST, not "
                         f"{item.get('method')!r}", number, "method")
    url = item.get("url")
    if url != endpoint:
        return LineError("invalid_url", f"the line's url {url!r} is not the batch's "
                         f"endpoint {endpoint!r}; a batch sends every line to one endpoint",
                         number, "url")
    body = item.get("body")
    if not isinstance(body, dict):
        return LineError("missing_required_parameter", "each line needs a JSON object "
                         "body: the request sent to the endpoint", number, "body")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return LineError("missing_required_parameter", "the body needs a string model",
                         number, "body.model")
    if not served(model):
        return LineError("model_not_found", f"the model {model!r} is not served here",
                         number, "body.model")
    if body.get("stream") is True:
        return LineError("invalid_request", "a batch request cannot stream; remove "
                         "stream", number, "body.stream")
    return BatchRequest(number, custom_id, url, body)


def read_requests(data: bytes, endpoint: str, served: Callable[[str], bool]
                  ) -> tuple[list[BatchRequest], list[LineError]]:
    """The file's requests for a batch on ``endpoint``, and every line that cannot run.

    ``served``: whether a model name is served (the router's or ``llmop up``'s table).
    An upload that passed ``check_upload`` has only JSON objects; a file that did not
    raises FileRefused. At most MAX_ERRORS errors are listed.
    """
    if endpoint not in ENDPOINTS:
        raise FileRefused(f"endpoint {endpoint!r} is not one a batch may use: "
                          f"{', '.join(ENDPOINTS)}")
    check_upload(data)
    requests: list[BatchRequest] = []
    errors: list[LineError] = []
    seen: dict[str, int] = {}
    for number, line in _lines(data):
        found = _request(number, json.loads(line), endpoint, served)
        if isinstance(found, BatchRequest):
            first = seen.setdefault(found.custom_id, number)
            if first != number:
                found = LineError("duplicate_custom_id", f"custom_id {found.custom_id!r} "
                                  f"is already used on line {first}; each must be unique",
                                  number, "custom_id")
        if isinstance(found, LineError):
            if len(errors) < MAX_ERRORS:
                errors.append(found)
        else:
            requests.append(found)
    return requests, errors
