"""What every native translation shares: its interface, OpenAI's answer shapes, input parts."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Protocol

from llm_operator.gateway.providers.sse import split_events, sse_data


class Untranslatable(ValueError):
    """The request asks what the provider's API cannot express; the message names the field."""

    @property
    def param(self) -> str | None:
        """The field at fault (the message's ``field: why`` prefix), if it names one."""
        head, sep, _ = str(self).partition(": ")
        return head if sep and not head.startswith("/") else None


@dataclass(frozen=True)
class Translated:
    """A provider request: where it goes (after the base URL), its body, what was left out."""

    path: str
    body: dict[str, Any]
    dropped: tuple[str, ...] = ()  # OpenAI parameters the provider has no counterpart for


class StreamAdapter(Protocol):
    """A provider's event stream in, OpenAI chat completion chunks (SSE bytes) out."""

    def feed(self, data: bytes) -> bytes:
        """OpenAI SSE bytes for the provider bytes received so far (possibly none)."""

    def close(self) -> bytes:
        """The last chunks once the provider's stream ended: usage, ``[DONE]``, or an error."""


class NativeApi(Protocol):
    """One provider's own API, spoken for OpenAI chat completion requests."""

    @property
    def name(self) -> str:
        """In messages: "anthropic", "gemini"."""

    def translate(self, body: dict[str, Any], model: str, *, stream: bool,
                  max_tokens: int) -> Translated:
        """The provider request for an OpenAI chat request; Untranslatable names the field."""

    def answer(self, body: dict[str, Any], now: int) -> dict[str, Any]:
        """The OpenAI chat completion for the provider's answer (HTTP 200)."""

    def error(self, status: int, body: Any) -> dict[str, Any]:
        """The OpenAI error body for the provider's error answer (its message kept)."""

    def stream(self, now: int) -> StreamAdapter:
        """A translator for one streamed answer."""


# OpenAI chat completion parameters (2026) a translation may meet. Anything else is left
# out and reported in x-llmop-dropped-params, like the ones a provider has no use for.
CHAT_PARAMETERS = frozenset({
    "model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens",
    "temperature", "top_p", "stop", "tools", "tool_choice", "parallel_tool_calls", "n",
    "user", "response_format", "logprobs", "top_logprobs", "seed", "frequency_penalty",
    "presence_penalty", "logit_bias", "service_tier", "store", "metadata", "reasoning_effort",
    "modalities", "audio", "prediction", "web_search_options", "verbosity", "functions",
    "function_call", "safety_identifier", "prompt_cache_key",
})

# Asked for, these change what the answer is; no provider translation can honour them.
REFUSED = {
    "logprobs": "token log probabilities are not translated",
    "top_logprobs": "token log probabilities are not translated",
    "audio": "audio output is not translated",
    "prediction": "predicted outputs are an OpenAI feature",
    "web_search_options": "web search is an OpenAI feature",
    "functions": "the legacy functions parameter is not translated: use tools",
    "function_call": "the legacy function_call parameter is not translated: use tool_choice",
}


def _asked(value: Any) -> bool:
    return value not in (None, False, [], {}, 0)


def screen(body: dict[str, Any], api: str, handled: frozenset[str]) -> tuple[str, ...]:
    """The parameters to drop; Untranslatable for one that cannot be dropped.

    ``handled`` are those the translation maps. ``modalities: ["text"]`` and ``n: 1`` are
    what every provider does anyway.
    """
    dropped = []
    for name in sorted(body):
        value = body[name]
        if name in handled or value is None:
            continue
        if name in REFUSED and _asked(value):
            raise Untranslatable(f"{name}: {REFUSED[name]} for a native {api} upstream; "
                                 "remove it")
        if name == "modalities" and value not in (["text"], []):
            raise Untranslatable(f"modalities: a native {api} upstream answers with text only")
        if name == "n" and value != 1:
            raise Untranslatable(f"n: a native {api} upstream returns one choice; remove n "
                                 "or set it to 1")
        if name not in REFUSED and name not in {"modalities", "n"}:
            dropped.append(name)
    return tuple(dropped)


def max_tokens_of(body: dict[str, Any], default: int) -> int:
    """max_completion_tokens, else max_tokens, else ``default``."""
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if value is not None:
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise Untranslatable(f"{name}: must be a positive integer")
            return value
    return default


def stops_of(body: dict[str, Any]) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return list(stop)
    raise Untranslatable("stop: give a string or a list of strings")


def messages_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Untranslatable("messages: give at least one message")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise Untranslatable(f"messages.{i}: must be an object")
    return messages


def text_of(content: Any, where: str) -> str:
    """A message's text: a string, or text (and refusal) parts joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind not in {"text", "refusal"}:
                raise Untranslatable(f"{where}.{j}.type: only text parts are allowed here")
            texts.append(str(part.get(kind, "")))
        return "".join(texts)
    raise Untranslatable(f"{where}: give a string or a list of parts")


@dataclass(frozen=True)
class Image:
    """An image part: inline (``data`` base64 with its media type) or by URL."""

    media_type: str | None
    data: str | None = None
    url: str | None = None


def user_parts(content: Any, where: str) -> list[str | Image]:
    """A user message's parts: text and images, in order."""
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        raise Untranslatable(f"{where}: give a string or a list of parts")
    parts: list[str | Image] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            parts.append(str(part.get("text", "")))
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if not isinstance(url, str) or not url:
                raise Untranslatable(f"{where}.{j}.image_url.url: required")
            parts.append(image_of(url, f"{where}.{j}.image_url.url"))
        else:
            raise Untranslatable(f"{where}.{j}.type: {kind!r} parts are not translated; use "
                                 "text or image_url")
    return parts


def image_of(url: str, where: str) -> Image:
    """A data: URL's media type and base64 data, or an http(s) URL."""
    if url.startswith("data:"):
        header, sep, data = url[5:].partition(",")
        media_type, _, encoding = header.partition(";")
        if not sep or encoding != "base64" or not media_type:
            raise Untranslatable(f"{where}: a data URL must be data:<media type>;base64,<data>")
        return Image(media_type, data=data)
    if url.startswith(("https://", "http://")):
        return Image(None, url=url)
    raise Untranslatable(f"{where}: give an https:// URL or a base64 data: URL")


def arguments_of(call: Any, where: str) -> dict[str, Any]:
    """A replayed tool call's arguments, which must be a JSON object."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise Untranslatable(f"{where}.function.name: required")
    text = function.get("arguments") or "{}"
    try:
        arguments = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        raise Untranslatable(f"{where}.function.arguments: not valid JSON") from None
    if not isinstance(arguments, dict):
        raise Untranslatable(f"{where}.function.arguments: must be a JSON object")
    return arguments


def add_turn(turns: list[dict[str, Any]], role: str, items: list[dict[str, Any]],
             field: str) -> None:
    """Append a turn, or extend the last one of the same role.

    Both native APIs want user and assistant (model) turns to alternate, so consecutive
    tool results join one turn.
    """
    if turns and turns[-1]["role"] == role:
        turns[-1][field].extend(items)
    else:
        turns.append({"role": role, field: items})


def function_tools(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``function`` objects of the request's tools (name, description, parameters)."""
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise Untranslatable("tools: give a list")
    out = []
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" \
                or not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise Untranslatable(f"tools.{i}: only function tools with a name are translated")
        out.append(function)
    return out


def tool_choice_of(body: dict[str, Any]) -> tuple[str, str | None] | None:
    """("auto" | "required" | "none", None) or ("function", its name); None when unset."""
    choice = body.get("tool_choice")
    if choice is None:
        return None
    if choice in ("auto", "required", "none"):
        return str(choice), None
    function = choice.get("function") if isinstance(choice, dict) else None
    if isinstance(function, dict) and isinstance(function.get("name"), str):
        return "function", function["name"]
    raise Untranslatable("tool_choice: auto, required, none or {type: function, function: "
                         "{name}}")


def count_of(usage: Any, name: str) -> int:
    """One token count from a provider's usage object (0 when absent or not an integer)."""
    value = usage.get(name) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass
class EventStream(ABC):
    """A provider's SSE stream, decoded event by event (``_event`` makes the OpenAI chunks)."""

    out: ChunkWriter
    _pending: bytes = field(default=b"", init=False)

    def feed(self, data: bytes) -> bytes:
        events, self._pending = split_events(self._pending + data)
        return b"".join(self._event(d) for e in events if (d := sse_data(e)) is not None)

    @abstractmethod
    def _event(self, event: dict[str, Any]) -> bytes:
        """The OpenAI chunks (SSE bytes) for one decoded provider event."""


# --- OpenAI's side ---------------------------------------------------------------------

def usage(prompt: int, completion: int, cached: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                           "total_tokens": prompt + completion}
    if cached:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    return out


def tool_call(index: int | None, call_id: str, name: str, arguments: str) -> dict[str, Any]:
    call: dict[str, Any] = {"id": call_id, "type": "function",
                            "function": {"name": name, "arguments": arguments}}
    return call if index is None else {"index": index, **call}


def completion(answer_id: str, model: str, created: int, choices: list[dict[str, Any]],
               tokens: dict[str, Any]) -> dict[str, Any]:
    return {"id": answer_id, "object": "chat.completion", "created": created, "model": model,
            "choices": choices, "usage": tokens}


def choice(index: int, text: str | None, calls: list[dict[str, Any]], finish: str
           ) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text if text or not calls
                               else None}
    if calls:
        message["tool_calls"] = calls
    return {"index": index, "message": message, "finish_reason": finish, "logprobs": None}


def error_body(message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def sse_json(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


@dataclass
class ChunkWriter:
    """OpenAI chunk events for one streamed answer (its id, model and time kept)."""

    created: int
    id: str = ""
    model: str = ""

    def delta(self, delta: dict[str, Any], finish: str | None = None, index: int = 0
              ) -> bytes:
        return sse_json({"id": self.id, "object": "chat.completion.chunk",
                         "created": self.created, "model": self.model, "choices": [
                             {"index": index, "delta": delta, "finish_reason": finish,
                              "logprobs": None}]})

    def usage(self, tokens: dict[str, Any]) -> bytes:
        return sse_json({"id": self.id, "object": "chat.completion.chunk",
                         "created": self.created, "model": self.model, "choices": [],
                         "usage": tokens})

    @staticmethod
    def error(message: str, kind: str = "server_error") -> bytes:
        """An error in the stream, as OpenAI sends one (its SDKs raise it), then the end."""
        return sse_json(error_body(message, kind)) + DONE
