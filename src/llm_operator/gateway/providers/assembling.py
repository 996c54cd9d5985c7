"""An OpenAI-compatible stream assembled into the plain answer it stands for (pure).

The gateway asks llama-server for a stream even when the client wants one JSON answer
(route ``streamUpstream``): llama-server stops generating for a client that left only when
it streams. These functions turn the stream's events back into the plain answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class StreamError(ValueError):
    """The stream carried an error event (its ``body``) instead of an answer."""

    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__(str(body.get("error")))
        self.body = body


def _append(target: dict[str, Any], key: str, piece: Any) -> None:
    if isinstance(piece, str):
        target[key] = (target.get(key) or "") + piece


def _tool_calls(message: dict[str, Any], deltas: list[Any]) -> None:
    """Merge streamed tool-call pieces (by their index) into the message's tool_calls."""
    calls: list[dict[str, Any]] = message.setdefault("tool_calls", [])
    for delta in deltas:
        if not isinstance(delta, dict):
            continue
        index = delta.get("index", len(calls))
        while len(calls) <= index:
            calls.append({"id": None, "type": "function",
                          "function": {"name": "", "arguments": ""}})
        call = calls[index]
        for key in ("id", "type"):
            if delta.get(key):
                call[key] = delta[key]
        function = delta.get("function") or {}
        _append(call["function"], "name", function.get("name"))
        _append(call["function"], "arguments", function.get("arguments"))


def _logprobs(choice: dict[str, Any], piece: Any) -> None:
    """Concatenate streamed logprobs: chat's ``content`` list, completions' parallel lists."""
    if not isinstance(piece, dict):
        return
    kept = choice["logprobs"] = choice.get("logprobs") or {}
    for key, value in piece.items():
        if isinstance(value, list):
            kept.setdefault(key, []).extend(value)


def assemble(events: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The plain answer (chat.completion or text_completion) of a stream's data events.

    Text and reasoning are concatenated per choice, tool calls merged by index, the last
    finish_reason kept, usage and llama-server's timings taken from the event carrying them.
    StreamError if an event is an error.
    """
    answer: dict[str, Any] = {}
    choices: dict[int, dict[str, Any]] = {}
    for event in events:
        if "error" in event:
            raise StreamError(event)
        if not answer:
            chunked = event.get("object") == "chat.completion.chunk"
            answer = {"id": event.get("id"),
                      "object": "chat.completion" if chunked else "text_completion",
                      "created": event.get("created"), "model": event.get("model")}
            if event.get("system_fingerprint"):
                answer["system_fingerprint"] = event["system_fingerprint"]
        for key in ("usage", "timings"):
            if event.get(key):
                answer[key] = event[key]
        for piece in event.get("choices") or ():
            if not isinstance(piece, dict):
                continue
            index = piece.get("index", 0)
            chat = answer["object"] == "chat.completion"
            choice = choices.setdefault(index, {"index": index, **(
                {"message": {"role": "assistant", "content": None}} if chat else {"text": ""}),
                "logprobs": None, "finish_reason": None})
            if chat:
                delta = piece.get("delta") or {}
                message = choice["message"]
                if delta.get("role"):
                    message["role"] = delta["role"]
                _append(message, "content", delta.get("content"))
                _append(message, "reasoning_content", delta.get("reasoning_content"))
                if delta.get("tool_calls"):
                    _tool_calls(message, delta["tool_calls"])
            else:
                _append(choice, "text", piece.get("text"))
            if piece.get("logprobs"):
                _logprobs(choice, piece["logprobs"])
            if piece.get("finish_reason"):
                choice["finish_reason"] = piece["finish_reason"]
    answer["choices"] = [choices[i] for i in sorted(choices)]
    return answer


def finished(answer: dict[str, Any]) -> bool:
    """Whether an assembled answer has choices and a finish_reason on every one."""
    choices = answer.get("choices") or []
    return bool(choices) and all(c.get("finish_reason") for c in choices)
