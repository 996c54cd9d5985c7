"""Request ids: one per /mcp request, echoed in X-Request-Id and stamped on every log line."""

from __future__ import annotations

import contextvars
import logging
import re
import uuid
from collections.abc import Mapping

HEADER = "x-request-id"
SCOPE_KEY = "llmop.request_id"  # where the ASGI scope carries it to the MCP handlers
NONE = "-"  # log lines outside any request
_SAFE = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")

current: contextvars.ContextVar[str] = contextvars.ContextVar("llmop_request_id", default=NONE)


def request_id(headers: Mapping[str, str]) -> str:
    """The client's X-Request-Id when it is a safe token (so traces join up), else a new one."""
    given = headers.get(HEADER, "")
    return given if _SAFE.match(given) else uuid.uuid4().hex[:16]


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` to every record a handler emits (format it with %(request_id)s)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = current.get()
        return True


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"


def configure_logging(level: str) -> None:
    """Root logging with request ids on every line (``llmop mcp``)."""
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT)
    for handler in logging.getLogger().handlers:
        handler.addFilter(RequestIdFilter())
