"""Google's Gemini API as an upstream: OpenAI chat requests to generateContent and back.

Shapes follow the Gemini API reference (v1beta ``models/{model}:generateContent`` and
``:streamGenerateContent?alt=sse``, ``x-goog-api-key``); the google-genai SDK's types check
them in the tests.
"""

from __future__ import annotations

import json
import mimetypes
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

from llm_operator.gateway.providers.shapes import (
    DONE,
    ChunkWriter,
    EventStream,
    Image,
    Translated,
    Untranslatable,
    add_turn,
    arguments_of,
    choice,
    completion,
    count_of,
    error_body,
    function_tools,
    max_tokens_of,
    messages_of,
    screen,
    stops_of,
    text_of,
    tool_call,
    tool_choice_of,
    usage,
    user_parts,
)

FILTERED = frozenset({"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII",
                      "IMAGE_SAFETY", "LANGUAGE"})

ERROR_TYPES = {"INVALID_ARGUMENT": "invalid_request_error",
               "FAILED_PRECONDITION": "invalid_request_error",
               "UNAUTHENTICATED": "authentication_error",
               "PERMISSION_DENIED": "permission_error", "NOT_FOUND": "not_found_error",
               "RESOURCE_EXHAUSTED": "rate_limit_error"}

HANDLED = frozenset({"model", "messages", "stream", "stream_options", "max_tokens",
                     "max_completion_tokens", "temperature", "top_p", "stop", "tools",
                     "tool_choice", "seed", "frequency_penalty", "presence_penalty",
                     "response_format"})

# Gemini 3 wants each function call's thoughtSignature back with the call. OpenAI clients
# echo a tool call's id, not unknown fields, so the signature rides in the id after this
# mark (it is not in base64's alphabet); Google's own extra_content field is set too.
SIGNATURE_MARK = "~"

CONFIG = (("temperature", "temperature"), ("top_p", "topP"), ("seed", "seed"),
          ("presence_penalty", "presencePenalty"), ("frequency_penalty", "frequencyPenalty"))


def _image(image: Image, where: str) -> dict[str, Any]:
    if image.data is not None:
        return {"inlineData": {"mimeType": image.media_type, "data": image.data}}
    assert image.url is not None
    media_type, _ = mimetypes.guess_type(urlsplit(image.url).path)
    if media_type is None:
        raise Untranslatable(f"{where}: the image's type cannot be told from its URL; send it "
                             "as a base64 data: URL")
    return {"fileData": {"mimeType": media_type, "fileUri": image.url}}


def _response(content: str) -> dict[str, Any]:
    """A tool result as Gemini's functionResponse.response, which must be an object."""
    try:
        value = json.loads(content)
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"content": content}


def _contents(body: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    """System texts and the conversation as Gemini contents (user and model turns)."""
    system: list[str] = []
    contents: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # tool call id -> function name (tool results need it)
    for i, message in enumerate(messages_of(body)):
        where, role, content = f"messages.{i}", message.get("role"), message.get("content")
        parts: list[dict[str, Any]]
        if role in {"system", "developer"}:
            system.append(text_of(content, f"{where}.content"))
            continue
        if role == "user":
            parts = [{"text": p} if isinstance(p, str) else _image(p, f"{where}.content")
                     for p in user_parts(content, f"{where}.content")
                     if not isinstance(p, str) or p]
        elif role == "assistant":
            text = text_of(content, f"{where}.content")
            parts = [{"text": text}] if text else []
            for k, call in enumerate(message.get("tool_calls") or []):
                arguments = arguments_of(call, f"{where}.tool_calls.{k}")
                name = call["function"]["name"]
                if isinstance(call.get("id"), str):
                    names[call["id"]] = name
                part: dict[str, Any] = {"functionCall": {"name": name, "args": arguments}}
                if signature := _signature(call):
                    part["thoughtSignature"] = signature
                parts.append(part)
            role = "model"
        elif role == "tool":
            name = names.get(str(message.get("tool_call_id")))
            if name is None:
                raise Untranslatable(f"{where}.tool_call_id: no earlier assistant tool call "
                                     "has this id")
            parts = [{"functionResponse": {"name": name, "response": _response(
                text_of(content, f"{where}.content"))}}]
            role = "user"
        else:
            raise Untranslatable(f"{where}.role: must be system, developer, user, assistant "
                                 "or tool")
        if not parts:
            continue
        add_turn(contents, role, parts, "parts")
    if not contents:
        raise Untranslatable("messages: give at least one user message")
    return system, contents


def _generation_config(body: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    config: dict[str, Any] = {"maxOutputTokens": max_tokens_of(body, max_tokens)}
    for ours, theirs in CONFIG:
        if body.get(ours) is not None:
            config[theirs] = body[ours]
    if stops := stops_of(body):
        config["stopSequences"] = stops
    response_format = body.get("response_format")
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind in {"json_object", "json_schema"}:
        config["responseMimeType"] = "application/json"
    if kind == "json_schema":
        schema = (response_format or {}).get("json_schema") or {}
        if not isinstance(schema.get("schema"), dict):
            raise Untranslatable("response_format.json_schema.schema: required")
        config["responseJsonSchema"] = schema["schema"]
    return config


def _tools(body: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    tools = function_tools(body)
    if tools:
        out["tools"] = [{"functionDeclarations": [
            {"name": f["name"],
             **({"description": f["description"]} if f.get("description") else {}),
             **({"parametersJsonSchema": f["parameters"]} if f.get("parameters") else {})}
            for f in tools]}]
    picked = tool_choice_of(body)
    if picked is not None:
        kind, name = picked
        calling: dict[str, Any] = {"mode": {"auto": "AUTO", "required": "ANY", "none": "NONE",
                                            "function": "ANY"}[kind]}
        if name is not None:
            calling["allowedFunctionNames"] = [name]
        out["toolConfig"] = {"functionCallingConfig": calling}
    return out


@dataclass(frozen=True)
class GeminiApi:
    """``POST {baseUrl}/models/{model}:generateContent``; the key in ``x-goog-api-key``."""

    name: str = "gemini"

    def translate(self, body: dict[str, Any], model: str, *, stream: bool,
                  max_tokens: int) -> Translated:
        dropped = screen(body, self.name, HANDLED)
        system, contents = _contents(body)
        out: dict[str, Any] = {"contents": contents}
        if system:
            out["systemInstruction"] = {"parts": [{"text": "\n\n".join(system)}]}
        out["generationConfig"] = _generation_config(body, max_tokens)
        out.update(_tools(body))
        name = quote(model.removeprefix("models/"), safe="-._~")
        path = f"/models/{name}:streamGenerateContent?alt=sse" if stream else \
            f"/models/{name}:generateContent"
        return Translated(path, out, dropped)

    def answer(self, body: dict[str, Any], now: int) -> dict[str, Any]:
        choices = []
        for n, candidate in enumerate(body.get("candidates") or []):
            text, calls = _parts(candidate, lambda k, n=n: _call_id(body, n, k))
            choices.append(choice(int(candidate.get("index", n)), text,
                                  [_openai_call(None, c) for c in calls],
                                  _finish(candidate.get("finishReason"), bool(calls))))
        if not choices:  # the prompt itself was blocked (promptFeedback.blockReason)
            choices.append(choice(0, None, [], "content_filter"))
        return completion(str(body.get("responseId") or f"gemini-{uuid.uuid4().hex}"),
                          str(body.get("modelVersion", "")), now, choices,
                          _usage(body.get("usageMetadata")))

    def error(self, status: int, body: Any) -> dict[str, Any]:
        error = body[0] if isinstance(body, list) and body else body  # streams send a list
        error = error.get("error") if isinstance(error, dict) else None
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            code = str(error.get("status") or "")
            kind = ERROR_TYPES.get(code, "api_error" if status < 500 else "server_error")
            return error_body(f"gemini: {error['message']}", kind, code or None)
        return error_body(f"gemini answered HTTP {status}", "api_error")

    def stream(self, now: int) -> GeminiStream:
        return GeminiStream(ChunkWriter(now))


def _signature(call: dict[str, Any]) -> str | None:
    """A replayed tool call's thought signature: Google's extra_content, else in the id."""
    extra = call.get("extra_content")
    google = extra.get("google") if isinstance(extra, dict) else None
    if isinstance(google, dict) and isinstance(google.get("thought_signature"), str):
        return str(google["thought_signature"])
    _, mark, signature = str(call.get("id", "")).partition(SIGNATURE_MARK)
    return signature if mark and signature else None


def _openai_call(index: int | None, call: tuple[str, str, str, str | None]
                 ) -> dict[str, Any]:
    call_id, name, arguments, signature = call
    if signature is None:
        return tool_call(index, call_id, name, arguments)
    return {**tool_call(index, f"{call_id}{SIGNATURE_MARK}{signature}", name, arguments),
            "extra_content": {"google": {"thought_signature": signature}}}


def _call_id(body: dict[str, Any], candidate: int, k: int) -> str:
    answer = body.get("responseId")
    return f"call_{answer}_{candidate}_{k}" if answer else f"call_{uuid.uuid4().hex}"


Call = tuple[str, str, str, str | None]  # id, name, arguments (JSON), thought signature


def _parts(candidate: dict[str, Any], call_id: Any) -> tuple[str, list[Call]]:
    """The answer text (thoughts left out) and the function calls."""
    parts = (candidate.get("content") or {}).get("parts") or []
    text = "".join(str(p["text"]) for p in parts
                   if isinstance(p, dict) and "text" in p and not p.get("thought"))
    calls: list[Call] = []
    for part in parts:
        call = part.get("functionCall") if isinstance(part, dict) else None
        if isinstance(call, dict):
            signature = part.get("thoughtSignature")
            calls.append((str(call.get("id") or call_id(len(calls))), str(call.get("name")),
                          json.dumps(call.get("args") or {}, separators=(",", ":")),
                          signature if isinstance(signature, str) else None))
    return text, calls


def _finish(reason: Any, called: bool) -> str:
    if reason in FILTERED:
        return "content_filter"
    if reason == "MAX_TOKENS":
        return "length"
    return "tool_calls" if called else "stop"


def _usage(raw: Any) -> dict[str, Any]:
    """OpenAI usage for usageMetadata: thoughts are billed as output."""
    return usage(count_of(raw, "promptTokenCount"),
                 count_of(raw, "candidatesTokenCount") + count_of(raw, "thoughtsTokenCount"),
                 count_of(raw, "cachedContentTokenCount"))


@dataclass
class GeminiStream(EventStream):
    """streamGenerateContent (alt=sse) in: each event a partial answer; OpenAI chunks out."""

    _usage: Any = None
    _started: bool = False
    _calls: dict[int, int] = field(default_factory=dict)  # candidate -> tool calls so far
    _finished: bool = False
    _failed: bool = False

    def _event(self, event: dict[str, Any]) -> bytes:
        if self._failed:
            return b""
        if isinstance(event.get("error"), dict):
            self._failed = True
            failure = GeminiApi().error(500, event)["error"]
            return self.out.error(failure["message"], failure["type"])
        out = b""
        if not self._started:
            self._started = True
            self.out.id = str(event.get("responseId") or f"gemini-{uuid.uuid4().hex}")
            self.out.model = str(event.get("modelVersion", ""))
            out += self.out.delta({"role": "assistant", "content": ""})
        if event.get("usageMetadata"):
            self._usage = event["usageMetadata"]
        for n, candidate in enumerate(event.get("candidates") or []):
            index = int(candidate.get("index", n))
            made = self._calls.get(index, 0)
            text, calls = _parts(candidate, lambda k, n=index, m=made: _call_id(
                event, n, m + k))
            if text:
                out += self.out.delta({"content": text}, index=index)
            if calls:
                out += self.out.delta({"tool_calls": [
                    _openai_call(made + k, c) for k, c in enumerate(calls)]}, index=index)
                self._calls[index] = made + len(calls)
            if candidate.get("finishReason"):
                self._finished = True
                out += self.out.delta({}, _finish(candidate["finishReason"],
                                                  bool(self._calls.get(index))), index=index)
        if not event.get("candidates") and (event.get("promptFeedback") or {}).get(
                "blockReason"):
            self._finished = True
            out += self.out.delta({}, "content_filter")
        return out

    def close(self) -> bytes:
        if self._failed:
            return b""
        self._failed = True
        if not self._finished:
            return self.out.error("gemini: the stream ended before a finishReason")
        return self.out.usage(_usage(self._usage)) + DONE
