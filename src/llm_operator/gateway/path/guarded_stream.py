"""A stream's text through the output guards as it comes: held back, checked, sent.

Each choice's text is taken out of the upstream's events and held: every string of a chat
delta or a completions choice but identifiers and enumerations (``content``,
``reasoning``, ``reasoning_content``, ``refusal``, an audio ``transcript``, a field added
next month), by its place in the delta. PII guards (``check``): once more than the
hold-back and half again is held, the held text is checked as one window (masked in place)
and all but the last ``hold`` characters pass on (guardrails/holdback.py says where the cut
falls). Judge and moderation guards (``judge``), after them: what passed waits until
``window`` characters have gathered (or the choice ends), then the answer so far is judged
whole (what was sent and the window) and the window goes out as a chunk of its own. A chat
choice's tool calls are held whole (their deltas merged) and checked when the choice ends,
their JSON arguments' string values masked in place, then sent as one delta before its
finish reason. Other events go on in order (role, finish reason, usage), each after the
text before it; the end of a choice, of the stream or an error event sends what is held,
checked, first. Strings in a delta's other lists, and in events without choices (an
error), are checked whole before their event goes. ``logprobs`` are dropped. An event whose
data is not a JSON object cannot be checked: it ends the stream with an error event, as a
guard that blocks does (the OpenAI SDK raises it), and ``stopped`` tells Relay to cut the
upstream.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from llm_operator.gateway.errors import error_response
from llm_operator.gateway.providers.sse import data_field, split_events
from llm_operator.guardrails.guards import Checked
from llm_operator.guardrails.holdback import cut
from llm_operator.guardrails.text import NOT_TEXT, UNMASKABLE, Spot, answer_spots, text_spots

Check = Callable[[list[Spot]], Awaitable["Checked | web.Response"]]
Field = tuple[int, tuple[str, ...]]  # a choice's index, and the text's place in its delta
DONE = b"data: [DONE]\n\n"


def _take_texts(holder: dict[str, Any], skip: frozenset[str]) -> tuple[
        list[tuple[tuple[str, ...], str]], list[Any]]:
    """The strings of a delta (or a completions choice) by their place, taken out of it.

    Objects inside are read too (and left out once emptied); lists other than ``skip`` are
    returned to be checked whole where they are. Iterative, as deep as the parser went.
    """
    texts: list[tuple[tuple[str, ...], str]] = []
    lists: list[Any] = []
    inner: list[tuple[dict[str, Any], str, dict[str, Any]]] = []  # (parent, key, object)
    stack: list[tuple[tuple[str, ...], dict[str, Any]]] = [((), holder)]
    while stack:
        path, node = stack.pop()
        for key in list(node):
            value = node[key]
            if key in skip and not path:
                continue
            if isinstance(value, str) and key not in NOT_TEXT:
                if value:
                    texts.append(((*path, key), value))
                del node[key]
            elif isinstance(value, dict):
                inner.append((node, key, value))
                stack.append(((*path, key), value))
            elif isinstance(value, list):
                lists.append(value)
    for parent, key, value in reversed(inner):  # the deepest first: emptied, left out
        if not value:
            del parent[key]
    return texts, lists


def unchecked(what: str) -> web.Response:
    """Output guards fail closed: an answer they cannot read is not sent (502)."""
    return error_response(502, f"the model's answer held {what}, which its output guards "
                          "cannot check, so it is not sent", "server_error",
                          "guardrail_unchecked")


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


class GuardedStream:
    """SSE bytes in (OpenAI's chunks, as the client would get them), checked SSE bytes out."""

    def __init__(self, check: Check | None, hold: int, *, judge: Check | None = None,
                 window: int = 0, tail: int = 65536) -> None:
        """``check``: the PII guards (None: none); ``judge``: the model guards (None: none).

        A judge reads the last ``tail`` characters of the answer so far.
        """
        self.check, self.judge, self.tail = check, judge, tail
        self.hold = hold if check is not None else 0
        self.window = window
        self.stopped = False
        self._pending = b""
        self._held: dict[Field, str] = {}  # (choice, field): text not yet sent
        self._unjudged: dict[Field, str] = {}  # passed the PII guards, not judged
        self._judged: dict[Field, str] = {}  # judged safe, and sent
        self._chat: dict[int, bool] = {}  # choice: a chat delta (else a completions text)
        self._calls: dict[int, dict[int, dict[str, Any]]] = {}  # choice: its tool calls
        self._envelope: dict[str, Any] = {}  # id, object, created, model of the last chunk

    async def feed(self, data: bytes) -> bytes:
        """What may go to the client of ``data`` (and of what was held before it)."""
        if self.stopped:
            return b""
        events, self._pending = split_events(self._pending + data)
        out = []
        for event in events:
            out.append(await self._one(event))
            if self.stopped:
                break
        return b"".join(out)

    async def finish(self) -> bytes:
        """The upstream's stream ended: everything held, checked."""
        if self.stopped:
            return b""
        pending, self._pending = self._pending, b""
        last = await self._one(pending + b"\n\n") if pending.strip() else b""  # cut short
        if self.stopped:
            return last
        return last + await self._release_all()

    async def _one(self, event: bytes) -> bytes:
        data = data_field(event)
        if data is None or data.strip() == b"[DONE]":  # a comment, [DONE]: after the text
            released = await self._release_all()
            return released if self.stopped else released + event
        try:
            payload = json.loads(data)
        except (ValueError, RecursionError):
            payload = None
        if not isinstance(payload, dict):
            return self._blocked(unchecked("an event that is not a JSON object"))
        choices = payload.get("choices")
        if not isinstance(choices, list) or not choices:
            # usage, an error: after every text before it, its own strings checked whole
            released = await self._release_all()
            if self.stopped:
                return released
            refused = await self._check_now(answer_spots(payload))
            return released + (refused if refused is not None else _event(payload))
        refused = await self._check_beside(payload, "choices")
        if refused is not None:
            return refused
        self._envelope = {k: v for k, v in payload.items() if k not in ("choices", "usage")}
        kept, ending = [], set()
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            took = await self._take(choice)
            if isinstance(took, bytes):
                return took  # refused: the error event
            index, keep = took
            if choice.get("finish_reason"):
                ending.add(index)
            if keep:
                kept.append(choice)
        out = []
        for key in list(self._held):
            index = key[0]
            if index in ending or len(self._held[key]) >= self.hold + self.hold // 2:
                out.append(await self._release(key, final=index in ending))
                if self.stopped:
                    return b"".join(out)
        for index in sorted(ending & set(self._calls)):
            out.append(await self._release_calls(index))
            if self.stopped:
                return b"".join(out)
        if kept or payload.get("usage"):
            out.append(_event({**payload, "choices": kept}))
        return b"".join(out)

    async def _take(self, choice: dict[str, Any]) -> tuple[int, bool] | bytes:
        """A choice's text taken out to be held, the rest checked where it is.

        Its index and whether it still carries something to send; or the error event.
        """
        index = choice.get("index", 0)
        index = index if isinstance(index, int) else 0
        for unmaskable in UNMASKABLE:
            choice.pop(unmaskable, None)
        chat = isinstance(choice.get("delta"), dict)
        if not chat and choice.get("delta") is not None:
            return self._blocked(unchecked("a choice's delta that is not an object"))
        if chat:  # what a choice carries beside its delta, checked where it is
            refused = await self._check_beside(choice, "delta")
            if refused is not None:
                return refused
        self._chat[index] = chat
        holder: dict[str, Any] = choice["delta"] if chat else choice
        if chat and isinstance(holder.get("tool_calls"), list):
            self._hold_calls(index, holder.pop("tool_calls"))
        texts, lists = _take_texts(holder, frozenset() if chat else frozenset({"delta"}))
        for place, text in texts:
            self._held[index, place] = self._held.get((index, place), "") + text
        if not chat and "text" not in holder:
            holder["text"] = ""  # a completions chunk always has its text
        refused = await self._check_now([s for items in lists for s in text_spots(items)])
        if refused is not None:
            return refused
        carries = bool(holder) if chat else any(
            v not in (None, "") for k, v in choice.items() if k not in ("index", "text"))
        # a choice that only carried text is not sent: the text goes out in chunks of its own
        return index, carries or bool(choice.get("finish_reason"))

    async def _check_beside(self, holder: dict[str, Any], key: str) -> bytes | None:
        """The strings of ``holder`` but those under ``key``, checked (masked) in place."""
        inside = holder.pop(key)
        try:
            return await self._check_now(answer_spots(holder))
        finally:
            holder[key] = inside

    async def _check_now(self, spots: list[Spot]) -> bytes | None:
        """Strings checked where they are (masked in place); the error event if refused."""
        for check in (self.check, self.judge):
            checked = await check(spots) if check is not None and spots else None
            if isinstance(checked, web.Response):
                return self._blocked(checked)
        return None

    async def _release_all(self) -> bytes:
        out = []
        for key in list(self._held):
            out.append(await self._release(key, final=True))
            if self.stopped:
                return b"".join(out)
        for index in sorted(self._calls):
            out.append(await self._release_calls(index))
            if self.stopped:
                break
        return b"".join(out)

    def _hold_calls(self, index: int, deltas: list[Any]) -> None:
        """A choice's tool-call deltas merged: id, type and name once, arguments appended."""
        calls = self._calls.setdefault(index, {})
        for delta in deltas:
            if not isinstance(delta, dict):
                continue
            at = delta.get("index", 0)
            call = calls.setdefault(at if isinstance(at, int) else 0,
                                    {"function": {"arguments": ""}})
            for key in ("id", "type"):
                if delta.get(key) is not None:
                    call[key] = delta[key]
            function = delta.get("function")
            if isinstance(function, dict):
                if function.get("name") is not None:
                    call["function"]["name"] = function["name"]
                if isinstance(function.get("arguments"), str):
                    call["function"]["arguments"] += function["arguments"]

    async def _release_calls(self, index: int) -> bytes:
        """A choice's tool calls, their arguments checked (masked in place), as one delta."""
        calls = self._calls.pop(index)
        listed = [{"index": i, **call} for i, call in sorted(calls.items())]
        refused = await self._check_now(answer_spots({"tool_calls": listed}))  # masked first,
        if refused is not None:  # then judged as masked
            return refused
        return _event({**self._envelope, "choices": [
            {"index": index, "delta": {"tool_calls": listed}, "finish_reason": None}]})

    def _blocked(self, refusal: web.Response) -> bytes:
        """A guard blocked (or could not run): the error event, and the stream ends."""
        self.stopped = True
        self._held.clear()
        self._unjudged.clear()
        self._judged.clear()
        self._calls.clear()
        body = refusal.body if isinstance(refusal.body, bytes) else b"{}"
        return b"data: " + body + b"\n\n" + DONE

    async def _release(self, key: Field, *, final: bool) -> bytes:
        """The held text of ``key`` checked; what may go now, as a chunk of its own."""
        window = [self._held.get(key, "")]
        if window[0] and self.check is not None:
            checked = await self.check([Spot(window, 0)])
            if isinstance(checked, web.Response):  # a guard blocked it, or could not run
                return self._blocked(checked)
        masked = window[0]
        sent = cut(masked, self.hold, final=final)
        self._held[key] = masked[sent:]
        if self.judge is not None:
            return await self._judge(key, masked[:sent], final=final)
        return self._chunk(key, masked[:sent])

    async def _judge(self, key: Field, text: str, *, final: bool) -> bytes:
        """``text`` (past the PII guards) gathered; a full window judged with what preceded it."""
        unjudged = self._unjudged.get(key, "") + text
        if not unjudged or (len(unjudged) < self.window and not final):
            self._unjudged[key] = unjudged
            return b""
        assert self.judge is not None
        so_far = [(self._judged.get(key, "") + unjudged)[-self.tail:]]  # bounded
        checked = await self.judge([Spot(so_far, 0)])
        if isinstance(checked, web.Response):
            return self._blocked(checked)
        self._judged[key], self._unjudged[key] = so_far[0], ""
        return self._chunk(key, unjudged)

    def _chunk(self, key: Field, text: str) -> bytes:
        """``text`` of ``key``'s choice and field as an event of its own (nothing if empty)."""
        if not text:
            return b""
        index, place = key
        nested: Any = text
        for name in reversed(place):
            nested = {name: nested}
        piece: dict[str, Any] = {"index": index, "delta": nested} if self._chat[index] \
            else {"index": index, **nested}
        return _event({**self._envelope, "choices": [{**piece, "finish_reason": None}]})
