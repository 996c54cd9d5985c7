"""Anthropic's Messages API in front of OpenAI-compatible models: requests, answers, streams.

Pure translation (no I/O): an Anthropic-shaped request becomes an OpenAI chat completion
request; the OpenAI answer, plain or streamed, becomes Anthropic's. Shapes follow
Anthropic's published Messages API reference.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                "function_call": "tool_use", "content_filter": "refusal"}


class MessagesError(ValueError):
    """The request cannot be translated; the message says which field and why."""


def error_body(kind: str, message: str) -> dict[str, Any]:
    """An error in Anthropic's shape (what its SDKs parse)."""
    return {"type": "error", "error": {"type": kind, "message": message}}


def _text_of(blocks: Any, where: str) -> str:
    if isinstance(blocks, str):
        return blocks
    if isinstance(blocks, list) and all(isinstance(b, dict) and b.get("type") == "text"
                                        for b in blocks):
        return "".join(str(b.get("text", "")) for b in blocks)
    raise MessagesError(f"{where}: give a string or a list of text blocks")


def _image(block: dict[str, Any], where: str) -> dict[str, Any]:
    source = block.get("source")
    if isinstance(source, dict) and source.get("type") == "base64":
        url = f"data:{source.get('media_type')};base64,{source.get('data')}"
    elif isinstance(source, dict) and source.get("type") == "url":
        url = str(source.get("url"))
    else:
        raise MessagesError(f"{where}.source: use a base64 or url image source")
    return {"type": "image_url", "image_url": {"url": url}}


def _tool_result_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(str(b.get("text", "")) for b in content
                   if isinstance(b, dict) and b.get("type") == "text")


def _messages(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise MessagesError("messages: give at least one message")
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        where = f"messages.{i}"
        if not isinstance(message, dict) or message.get("role") not in {"user", "assistant"}:
            raise MessagesError(f"{where}.role: must be user or assistant")
        role, content = message["role"], message.get("content")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        if not isinstance(content, list):
            raise MessagesError(f"{where}.content: give a string or a list of content blocks")
        parts: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        for j, block in enumerate(content):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text":
                parts.append({"type": "text", "text": str(block.get("text", ""))})
            elif kind == "image" and role == "user":
                parts.append(_image(block, f"{where}.content.{j}"))
            elif kind == "tool_use" and role == "assistant":
                calls.append({"id": block.get("id"), "type": "function", "function": {
                    "name": block.get("name"), "arguments": json.dumps(block.get("input", {}))}})
            elif kind == "tool_result" and role == "user":
                out.append({"role": "tool", "tool_call_id": block.get("tool_use_id"),
                            "content": _tool_result_text(block.get("content"))})
            elif kind in {"thinking", "redacted_thinking"}:
                continue  # the model's own earlier reasoning: not replayed upstream
            else:
                raise MessagesError(f"{where}.content.{j}.type: {kind!r} is not supported "
                                    f"in a {role} message")
        if role == "assistant":
            text = "".join(p["text"] for p in parts if p["type"] == "text")
            entry: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                entry["tool_calls"] = calls
            out.append(entry)
        elif parts:
            only_text = all(p["type"] == "text" for p in parts)
            out.append({"role": "user", "content": "".join(p["text"] for p in parts)
                        if only_text else parts})
    return out


def _tool_choice(choice: Any) -> Any:
    if not isinstance(choice, dict):
        raise MessagesError("tool_choice: give an object with a type")
    kind = choice.get("type")
    if kind == "tool":
        return {"type": "function", "function": {"name": choice.get("name")}}
    mapped = {"auto": "auto", "any": "required", "none": "none"}.get(str(kind))
    if mapped is None:
        raise MessagesError("tool_choice.type: must be auto, any, tool or none")
    return mapped


def to_openai(request: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI chat completion request for an Anthropic Messages request."""
    model = request.get("model")
    if not isinstance(model, str) or not model:
        raise MessagesError("model: required")
    max_tokens = request.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise MessagesError("max_tokens: required, a positive integer")
    messages = _messages(request.get("messages"))
    if "system" in request and request["system"] is not None:
        messages.insert(0, {"role": "system", "content": _text_of(request["system"],
                                                                  "system")})
    body: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": max_tokens}
    for ours, theirs in (("temperature", "temperature"), ("top_p", "top_p")):
        if request.get(ours) is not None:
            body[theirs] = request[ours]
    if request.get("stop_sequences"):
        body["stop"] = request["stop_sequences"]
    tools = request.get("tools")
    if tools:
        body["tools"] = [{"type": "function", "function": {
            "name": t.get("name"), "description": t.get("description", ""),
            "parameters": t.get("input_schema", {"type": "object"})}}
            for t in tools if isinstance(t, dict)]
    if request.get("tool_choice") is not None:
        body["tool_choice"] = _tool_choice(request["tool_choice"])
    if request.get("stream") is True:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def _usage(usage: Any) -> dict[str, int]:
    usage = usage if isinstance(usage, dict) else {}
    return {"input_tokens": int(usage.get("prompt_tokens") or 0),
            "output_tokens": int(usage.get("completion_tokens") or 0)}


def message_id() -> str:
    return f"msg_{uuid.uuid4().hex[:24]}"


def _arguments(text: Any) -> Any:
    try:
        return json.loads(text) if isinstance(text, str) and text else {}
    except ValueError:
        return {"_raw": text}


def from_openai(answer: dict[str, Any], model: str) -> dict[str, Any]:
    """Anthropic's message for an OpenAI chat completion (the first choice)."""
    choices = answer.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    if message.get("content"):
        content.append({"type": "text", "text": str(message["content"])})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        content.append({"type": "tool_use", "id": call.get("id") or f"toolu_{uuid.uuid4().hex}",
                        "name": function.get("name"),
                        "input": _arguments(function.get("arguments"))})
    return {"id": message_id(), "type": "message", "role": "assistant", "model": model,
            "content": content,
            "stop_reason": STOP_REASONS.get(str(choice.get("finish_reason")), "end_turn"),
            "stop_sequence": None, "usage": _usage(answer.get("usage"))}


def sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


@dataclass
class StreamTranslator:
    """OpenAI chat completion chunks in, Anthropic Messages stream events out."""

    model: str
    id: str = field(default_factory=message_id)
    _started: bool = False
    _block: int = -1  # index of the open content block
    _open: str | None = None  # "text" or a tool call's OpenAI index as "tool:N"
    _stop: str = "end_turn"
    _usage: dict[str, int] = field(default_factory=lambda: {"input_tokens": 0,
                                                            "output_tokens": 0})

    def _start(self) -> list[bytes]:
        if self._started:
            return []
        self._started = True
        return [sse("message_start", {"type": "message_start", "message": {
            "id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0}}}),
            sse("ping", {"type": "ping"})]

    def _close_block(self) -> list[bytes]:
        if self._open is None:
            return []
        self._open = None
        return [sse("content_block_stop", {"type": "content_block_stop", "index": self._block})]

    def _open_block(self, kind: str, block: dict[str, Any]) -> list[bytes]:
        out = self._close_block()
        self._block += 1
        self._open = kind
        out.append(sse("content_block_start", {"type": "content_block_start",
                                               "index": self._block, "content_block": block}))
        return out

    def chunk(self, data: dict[str, Any]) -> list[bytes]:
        """The events for one OpenAI chunk (a decoded ``data:`` line)."""
        out = self._start()
        if isinstance(data.get("usage"), dict):
            self._usage = _usage(data["usage"])
        for choice in data.get("choices") or []:
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if text:
                if self._open != "text":
                    out += self._open_block("text", {"type": "text", "text": ""})
                out.append(sse("content_block_delta", {
                    "type": "content_block_delta", "index": self._block,
                    "delta": {"type": "text_delta", "text": text}}))
            for call in delta.get("tool_calls") or []:
                key = f"tool:{call.get('index', 0)}"
                function = call.get("function") or {}
                if self._open != key:
                    out += self._open_block(key, {
                        "type": "tool_use", "id": call.get("id") or f"toolu_{uuid.uuid4().hex}",
                        "name": function.get("name"), "input": {}})
                if function.get("arguments"):
                    out.append(sse("content_block_delta", {
                        "type": "content_block_delta", "index": self._block,
                        "delta": {"type": "input_json_delta",
                                  "partial_json": function["arguments"]}}))
            if choice.get("finish_reason"):
                self._stop = STOP_REASONS.get(str(choice["finish_reason"]), "end_turn")
        return out

    def finish(self) -> list[bytes]:
        """The closing events, once the OpenAI stream ended ([DONE] or end of body)."""
        out = self._start() + self._close_block()
        out.append(sse("message_delta", {
            "type": "message_delta", "delta": {"stop_reason": self._stop,
                                               "stop_sequence": None},
            "usage": {"output_tokens": self._usage["output_tokens"],
                      "input_tokens": self._usage["input_tokens"]}}))
        out.append(sse("message_stop", {"type": "message_stop"}))
        return out
