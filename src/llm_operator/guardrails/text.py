"""Where the text is in OpenAI-shaped requests and answers: what guards read and rewrite."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, NamedTuple


class Spot(NamedTuple):
    """One string in a JSON body: ``holder[key]``, read and replaced in place.

    ``written`` is called after a replacement: a string inside a tool call's JSON
    ``arguments`` writes the arguments back.
    """

    holder: dict[str, Any] | list[Any]
    key: str | int
    written: Callable[[], None] | None = None

    @property
    def text(self) -> str:
        value = self.holder[self.key]  # type: ignore[index]
        assert isinstance(value, str)
        return value

    def replace(self, text: str) -> None:
        self.holder[self.key] = text  # type: ignore[index]
        if self.written is not None:
            self.written()


def _string(holder: dict[str, Any] | list[Any], key: str | int) -> list[Spot]:
    if isinstance(holder, dict):
        found = holder.get(key) if isinstance(key, str) else None
    else:
        found = holder[key] if isinstance(key, int) and key < len(holder) else None
    return [Spot(holder, key)] if isinstance(found, str) else []


def _strings(holder: dict[str, Any], key: str) -> list[Spot]:
    """``holder[key]`` when a string, or each string of it when a list."""
    value = holder.get(key)
    if isinstance(value, list):
        return [Spot(value, i) for i, item in enumerate(value) if isinstance(item, str)]
    return _string(holder, key)


def _content(message: Any, key: str = "content") -> list[Spot]:
    """A message's content: a string, or its parts' text (images and audio are skipped)."""
    if not isinstance(message, dict):
        return []
    content = message.get(key)
    if isinstance(content, list):
        return [spot for part in content if isinstance(part, dict)
                for spot in _string(part, "text")]
    return _string(message, key)


def _leaves(value: Any, written: Callable[[], None]) -> list[Spot]:
    """Every string value in parsed JSON (object keys are not text to check)."""
    if isinstance(value, dict):
        return [s for k in value for s in (
            [Spot(value, k, written)] if isinstance(value[k], str) else _leaves(value[k],
                                                                              written))]
    if isinstance(value, list):
        return [s for i, item in enumerate(value) for s in (
            [Spot(value, i, written)] if isinstance(item, str) else _leaves(item, written))]
    return []


def _arguments(function: dict[str, Any]) -> list[Spot]:
    """A tool call's ``arguments``: each string in its JSON.

    One changed writes the arguments back, so they stay valid JSON; arguments that are not
    JSON are one text.
    """
    try:
        parsed = json.loads(function["arguments"])
    except ValueError:
        return [Spot(function, "arguments")]

    def written() -> None:
        function["arguments"] = json.dumps(parsed, ensure_ascii=False)

    return _leaves(parsed, written)


def _tool_calls(message: Any) -> list[Spot]:
    """The arguments of a message's tool calls (an assistant's, asked or answered)."""
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    return [s for call in calls if isinstance(call, dict)
            and isinstance(call.get("function"), dict)
            and isinstance(call["function"].get("arguments"), str)
            for s in _arguments(call["function"])] if isinstance(calls, list) else []


def _function_call(item: Any) -> list[Spot]:
    """A Responses API ``function_call`` item's arguments, a ``function_call_output``'s text."""
    if not isinstance(item, dict):
        return []
    if item.get("type") == "function_call" and isinstance(item.get("arguments"), str):
        return _arguments(item)
    if item.get("type") == "function_call_output":
        return _string(item, "output")
    return []


def _each(body: dict[str, Any], key: str) -> list[Any]:
    items = body.get(key)
    return items if isinstance(items, list) else []


def request_spots(path: str, body: dict[str, Any]) -> list[Spot]:
    """The text a request asks the model about, by the API its path names."""
    if path.endswith("/chat/completions"):
        return [s for m in _each(body, "messages") for s in (*_content(m), *_tool_calls(m))]
    if path.endswith("/completions"):
        return _strings(body, "prompt")  # a prompt of token ids has no text to check
    if path.endswith("/embeddings"):
        return _strings(body, "input")
    if path.endswith("/responses"):
        if isinstance(body.get("input"), str):
            return [*_string(body, "instructions"), *_string(body, "input")]
        return [*_string(body, "instructions"),
                *(s for item in _each(body, "input")
                  for s in (*_content(item), *_function_call(item)))]
    return []


def answer_spots(path: str, body: dict[str, Any]) -> list[Spot]:
    """The text of a model's answer to ``path``, in OpenAI's shape."""
    if path.endswith("/chat/completions"):
        return [s for c in _each(body, "choices") if isinstance(c, dict)
                for s in (*_content(c.get("message"), "content"),
                          *_content(c.get("message"), "reasoning_content"),
                          *_tool_calls(c.get("message")))]
    if path.endswith("/completions"):
        return [s for c in _each(body, "choices") if isinstance(c, dict)
                for s in _string(c, "text")]
    if path.endswith("/responses"):
        return [s for item in _each(body, "output")
                for s in (*_content(item), *_function_call(item))]
    return []
