"""What the guardrail tests at the gateway share: guard specs, the SDK, streams, judges."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai

from fake_upstream import FakeUpstream, Reply

Upstream = tuple[FakeUpstream, str]
CARD, MAIL = "4111 1111 1111 1111", "jane.doe@example.com"
SECRET_TEXT = f"My card is {CARD}, mail me at {MAIL}"


def guards(*, input: list[dict[str, Any]] | None = None,
           output: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"guardrails": {k: v for k, v in (("input", input), ("output", output)) if v}}


def pii(name: str, action: str, **more: Any) -> dict[str, Any]:
    return {"name": name, "action": action, "pii": more}


def sdk(client: Any, key: str = "unused") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key=key,
                              max_retries=0)


async def ask(client: Any, text: str = SECRET_TEXT, **kwargs: Any) -> Any:
    async with sdk(client, kwargs.pop("key", "unused")) as oai:
        return await oai.chat.completions.create(
            model="gpt-5.5", messages=[{"role": "user", "content": text}], **kwargs)


def sent(fake: FakeUpstream) -> str:
    content = fake.requests[-1]["body"]["messages"][0]["content"]
    assert isinstance(content, str)
    return content


def chunked(pieces: list[str], finish: str = "stop") -> Reply:
    """A chat stream of ``pieces``, its finish reason and usage, from the fake upstream."""
    head = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    events = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant",
                                                          "content": ""}}]},
              *({**head, "choices": [{"index": 0, "delta": {"content": p}}]} for p in pieces),
              {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
              {**head, "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 9,
                                                "total_tokens": 14}}]
    return Reply(chunks=[f"data: {json.dumps(e)}\n\n".encode() for e in events]
                 + [b"data: [DONE]\n\n"])


async def streamed_until_error(client: Any, content: str = "Tell me"
                               ) -> tuple[list[Any], openai.APIError | None]:
    """A chat stream's chunks as the SDK yields them, and the error event that ended it
    (None: it ended with [DONE])."""
    received: list[Any] = []
    try:
        async with sdk(client) as oai:
            stream = await oai.chat.completions.create(
                model="gpt-5.5", messages=[{"role": "user", "content": content}],
                stream=True)
            async for chunk in stream:
                received.append(chunk)
    except openai.APIError as exc:
        return received, exc
    return received, None


async def streamed(client: Any, **kwargs: Any) -> list[Any]:
    async with sdk(client) as oai:
        stream = await oai.chat.completions.create(
            model="gpt-5.5", messages=[{"role": "user", "content": "Tell me"}], stream=True,
            **kwargs)
        return [chunk async for chunk in stream]


def text_of(chunks: list[Any]) -> list[str]:
    return [c.choices[0].delta.content for c in chunks if c.choices and
            c.choices[0].delta.content]


def judge_routes(base_url: str, key_file: Path, rails: dict[str, Any]) -> dict[str, Any]:
    """The model, guarded by a judge, and the judge as a route of its own (same upstream)."""
    upstream = {"baseUrl": base_url, "apiKey": {"file": str(key_file)}}
    return {"routes": [{"models": ["gpt-5.5"], "upstream": upstream, "guardrails": rails},
                       {"models": ["guard"], "upstream": upstream}]}


def judged(on_error: str = "closed") -> list[dict[str, Any]]:
    return [{"name": "safety", "action": "block", "onError": on_error,
             "judge": {"model": "guard", "family": "llama-guard-3", "categories": ["S1", "S9"]}}]


def verdict(text: str) -> Reply:
    return Reply(body={"id": "cmpl-1", "object": "text_completion", "model": "guard",
                       "choices": [{"index": 0, "text": text, "finish_reason": "stop"}]})


def streamed_tool_call(arguments: str, pieces: int = 4) -> Reply:
    """A chat stream whose answer is one tool call, its arguments in ``pieces`` deltas."""
    head = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    size = -(-len(arguments) // pieces)
    parts = [arguments[i:i + size] for i in range(0, len(arguments), size)]
    first = {"index": 0, "id": "call-1", "type": "function",
             "function": {"name": "send_mail", "arguments": ""}}
    events = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant",
                                                          "tool_calls": [first]}}]},
              *({**head, "choices": [{"index": 0, "delta": {"tool_calls": [
                  {"index": 0, "function": {"arguments": part}}]}}]} for part in parts),
              {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}]
    return Reply(chunks=[f"data: {json.dumps(e)}\n\n".encode() for e in events]
                 + [b"data: [DONE]\n\n"])
