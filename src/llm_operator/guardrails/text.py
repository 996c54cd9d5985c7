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
    """Every string value in parsed JSON (object keys are not text to check), in order.

    Iterative: arguments nested as deep as the parser allows do not overflow the stack.
    """
    found: list[Spot] = []
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        later = []
        for key, item in items:
            if isinstance(item, str):
                found.append(Spot(node, key, written))
            elif isinstance(item, dict | list):
                later.append(item)
        stack.extend(reversed(later))
    return found


def _arguments(function: dict[str, Any]) -> list[Spot]:
    """A tool call's ``arguments``: each string in its JSON.

    One changed writes the arguments back, so they stay valid JSON; arguments that are a
    JSON string are that string; arguments that are not JSON (or nest deeper than the
    parser goes) are one text.
    """
    try:
        parsed = json.loads(function["arguments"])
    except (ValueError, RecursionError):
        return [Spot(function, "arguments")]
    holder = [parsed]

    def written() -> None:
        function["arguments"] = json.dumps(holder[0], ensure_ascii=False)

    return _leaves(holder, written)


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


# String values that identify or enumerate rather than say something: an answer's text is
# every other string, wherever the upstream puts it (a field added next month included).
NOT_TEXT = frozenset({
    "id", "object", "model", "role", "type", "finish_reason", "stop_reason",
    "system_fingerprint", "service_tier", "status", "call_id", "tool_call_id", "name",
    "data", "format", "mime_type", "encoding_format", "created", "index"})
# What cannot be masked safely: each token of the answer again, one by one. Refused in a
# request and removed from an answer while output guards run.
UNMASKABLE = ("logprobs", "top_logprobs")


def text_spots(value: Any) -> list[Spot]:
    """Every string a reader reads in parsed JSON, in document order, but ``NOT_TEXT``.

    A string ``arguments`` (a tool call's JSON) gives each string value in it instead.
    Iterative: no nesting depth the parser accepted makes it recurse.
    """
    found: list[Spot] = []
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            later = []
            for key, item in node.items():
                if isinstance(item, str):
                    if key == "arguments":
                        found.extend(_arguments(node))
                    elif key not in NOT_TEXT:
                        found.append(Spot(node, key))
                elif isinstance(item, dict | list):
                    later.append(item)
            stack.extend(reversed(later))
        elif isinstance(node, list):
            later = []
            for index, item in enumerate(node):
                if isinstance(item, str):
                    found.append(Spot(node, index))
                elif isinstance(item, dict | list):
                    later.append(item)
            stack.extend(reversed(later))
    return found


def drop_unmaskable(value: Any) -> bool:
    """Remove ``UNMASKABLE`` fields from every object in parsed JSON, in place.

    True when one held something (not null).
    """
    dropped = False
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key in UNMASKABLE:
                dropped = node.pop(key, None) is not None or dropped
            stack.extend(v for v in node.values() if isinstance(v, dict | list))
        elif isinstance(node, list):
            stack.extend(v for v in node if isinstance(v, dict | list))
    return dropped


def asks_unmaskable(body: dict[str, Any]) -> str | None:
    """The request's parameter that asks for what output guards cannot mask, if any."""
    logprobs = body.get("logprobs")  # chat: true; text completions: a count, 0 included
    if logprobs is not None and logprobs is not False:
        return "logprobs"
    top = body.get("top_logprobs")
    if top is not None and top is not False and top != 0:
        return "top_logprobs"
    return None


def token_ids(path: str, body: dict[str, Any]) -> str | None:
    """The request's field that holds token ids where input guards read text, if any.

    Text completions' ``prompt`` and embeddings' ``input`` may be token ids (a list of
    integers, or lists of them): a guard reads no text there, so what they encode would
    pass unread.
    """
    key = "prompt" if path.endswith("/completions") and not path.endswith(
        "/chat/completions") else "input" if path.endswith("/embeddings") else None
    value = body.get(key) if key is not None else None
    if value is None or isinstance(value, str) or (
            isinstance(value, list) and all(isinstance(item, str) for item in value)):
        return None
    return key


def answer_spots(body: dict[str, Any]) -> list[Spot]:
    """The text of a model's answer, whatever its API: every string but ``NOT_TEXT``.

    A checklist of known fields missed each field added after it (``reasoning``,
    ``refusal``, an audio ``transcript``); this reads them all.
    """
    return text_spots(body)
