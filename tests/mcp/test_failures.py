"""Credentials are cut out of upstream error text before it is logged."""

from __future__ import annotations

import pytest

from llm_operator.mcp_server.failures import detail, redact, summary


@pytest.mark.parametrize(("text", "safe"), [
    ("bad key sk-proj-abcdef123456", "bad key [REDACTED]"),
    ("Authorization: Bearer eyJhbGciOi.J9x-y", "Authorization: [REDACTED]"),
    ("sent bearer abc.def", "sent bearer [REDACTED]"),
    ("api_key=abc123&x=1", "api_key=[REDACTED]&x=1"),
    ('{"x-api-key": "k-123"}', '{"x-api-key": "[REDACTED]"}'),
    ("key AIzaSyA-1234567890abcdefghijk", "key [REDACTED]"),
    ("https://user:hunter2@db.internal/x", "https://[REDACTED]@db.internal/x"),
    ("context length exceeded", "context length exceeded"),
])
def test_credentials_are_redacted(text: str, safe: str) -> None:
    assert redact(text) == safe


def test_the_detail_is_the_upstream_message_else_its_text_on_one_line() -> None:
    assert detail({"error": {"message": "too\nlong"}}) == "too long"
    assert detail(None, "<html>502 Bad Gateway</html>") == "<html>502 Bad Gateway</html>"
    assert len(detail(None, "x" * 1000)) == 300


@pytest.mark.parametrize(("status", "meaning"), [
    (429, "the model is rate limited; try again shortly"),
    (502, "the model's server failed"),
    (418, "the model's server refused the request"),
])
def test_agents_get_the_status_and_its_meaning(status: int, meaning: str) -> None:
    assert summary("model m (t)", status) == f"model m (t) answered HTTP {status}: {meaning}"
