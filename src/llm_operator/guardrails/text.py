"""Where the text is in OpenAI-shaped requests and answers: what guards read and rewrite."""

from __future__ import annotations

from typing import Any, NamedTuple


class Spot(NamedTuple):
    """One string in a JSON body: ``holder[key]``, read and replaced in place."""

    holder: dict[str, Any] | list[Any]
    key: str | int

    @property
    def text(self) -> str:
        value = self.holder[self.key]  # type: ignore[index]
        assert isinstance(value, str)
        return value

    def replace(self, text: str) -> None:
        self.holder[self.key] = text  # type: ignore[index]


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


def _each(body: dict[str, Any], key: str) -> list[Any]:
    items = body.get(key)
    return items if isinstance(items, list) else []


def request_spots(path: str, body: dict[str, Any]) -> list[Spot]:
    """The text a request asks the model about, by the API its path names."""
    if path.endswith("/chat/completions"):
        return [s for m in _each(body, "messages") for s in _content(m)]
    if path.endswith("/completions"):
        return _strings(body, "prompt")  # a prompt of token ids has no text to check
    if path.endswith("/embeddings"):
        return _strings(body, "input")
    if path.endswith("/responses"):
        if isinstance(body.get("input"), str):
            return [*_string(body, "instructions"), *_string(body, "input")]
        return [*_string(body, "instructions"),
                *(s for item in _each(body, "input") for s in _content(item))]
    return []


def answer_spots(path: str, body: dict[str, Any]) -> list[Spot]:
    """The text of a model's answer to ``path``, in OpenAI's shape."""
    if path.endswith("/chat/completions"):
        return [s for c in _each(body, "choices") if isinstance(c, dict)
                for key in ("content", "reasoning_content")
                for s in _content(c.get("message"), key)]
    if path.endswith("/completions"):
        return [s for c in _each(body, "choices") if isinstance(c, dict)
                for s in _string(c, "text")]
    if path.endswith("/responses"):
        return [s for item in _each(body, "output") for s in _content(item)]
    return []
