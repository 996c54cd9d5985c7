"""A batch input file: refused at upload when it cannot be one, read line by line after."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llm_operator.batch import input as batch_input
from llm_operator.batch.input import FileRefused, check_upload, read_requests

CHAT = "/v1/chat/completions"


def line(custom_id: str = "r1", url: str = CHAT, model: str = "gemma",
         **extra: Any) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": url,
            "body": {"model": model, "messages": [{"role": "user", "content": "hi"}]},
            **extra}


def jsonl(*items: Any) -> bytes:
    return "".join(json.dumps(i) + "\n" for i in items).encode()


def served(model: str) -> bool:
    return model in {"gemma", "qwen"}


@pytest.mark.parametrize(("data", "message"), [
    (b"", "the file is empty"),
    (b"\n  \n", "the file is empty"),
    (jsonl(line()) + b'{"custom_id": \n', "line 2 is not JSON"),
    (jsonl(line(), [1, 2]), "line 2 is a JSON list, not an object"),
    (jsonl(line()) + b"\xff\xfe oops\n", "not UTF-8: line 2"),
    (b"[" * 100_000 + b"\n", "line 1 is not JSON"),
], ids=["empty", "blank-lines", "bad-json-line", "not-an-object", "not-utf8", "too-deep"])
def test_an_upload_that_cannot_be_a_batch_file_is_refused_naming_the_line(
        data: bytes, message: str) -> None:
    with pytest.raises(FileRefused, match=message):
        check_upload(data)


def test_the_request_and_size_limits_are_openais(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (batch_input.MAX_REQUESTS, batch_input.MAX_BYTES) == (50_000, 200 * 1024 ** 2)
    monkeypatch.setattr(batch_input, "MAX_REQUESTS", 2)
    with pytest.raises(FileRefused, match="3 requests; a batch may have at most 2"):
        check_upload(jsonl(line("a"), line("b"), line("c")))
    monkeypatch.setattr(batch_input, "MAX_BYTES", 10)
    with pytest.raises(FileRefused, match=r"\d+ bytes; a batch file may have at most 10 "):
        check_upload(jsonl(line()))


def test_a_good_file_counts_its_requests_blank_lines_aside() -> None:
    assert check_upload(jsonl(line("a"), line("b")) + b"\n\n") == 2


@pytest.mark.parametrize(("item", "code", "param"), [
    ({**line(), "custom_id": ""}, "missing_required_parameter", "custom_id"),
    ({**line(), "method": "GET"}, "invalid_request", "method"),
    (line(url="/v1/embeddings"), "invalid_url", "url"),
    ({**line(), "body": "hi"}, "missing_required_parameter", "body"),
    ({**line(), "body": {"messages": []}}, "missing_required_parameter", "body.model"),
    (line(model="gpt-9"), "model_not_found", "body.model"),
    ({**line(), "body": {"model": "gemma", "stream": True}}, "invalid_request",
     "body.stream"),
], ids=["no-custom-id", "not-post", "other-endpoint", "no-body", "no-model",
        "unknown-model", "stream"])
def test_a_line_that_cannot_run_is_an_error_naming_it(item: dict[str, Any], code: str,
                                                      param: str) -> None:
    requests, errors = read_requests(jsonl(line("ok"), item), CHAT, served)
    assert [r.custom_id for r in requests] == ["ok"]
    assert [(e.code, e.param, e.line) for e in errors] == [(code, param, 2)]
    assert errors[0].as_openai()["line"] == 2


def test_a_repeated_custom_id_is_an_error_on_its_second_line() -> None:
    requests, errors = read_requests(jsonl(line("a"), line("b"), line("a")), CHAT, served)
    assert [r.line for r in requests] == [1, 2]
    assert [(e.code, e.line) for e in errors] == [("duplicate_custom_id", 3)]
    assert "already used on line 1" in errors[0].message


def test_requests_keep_their_line_id_and_body() -> None:
    requests, errors = read_requests(jsonl(line("a", model="qwen"), line("b")), CHAT, served)
    assert errors == []
    assert [(r.line, r.custom_id, r.model, r.url) for r in requests] == [
        (1, "a", "qwen", CHAT), (2, "b", "gemma", CHAT)]


def test_at_most_a_hundred_line_errors_are_listed() -> None:
    bad = [line(f"r{i}", model="gpt-9") for i in range(150)]
    _, errors = read_requests(jsonl(*bad), CHAT, served)
    assert len(errors) == 100 and errors[-1].line == 100


def test_a_batch_on_an_endpoint_batches_do_not_serve_is_refused() -> None:
    with pytest.raises(FileRefused, match="'/v1/responses' is not one a batch may use"):
        read_requests(jsonl(line()), "/v1/responses", served)
