"""llama-server's router mode for a pool: its arguments, the members' preset, their load errors."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

# Set by the router for each member it starts (llama.cpp's tools/server README): left out.
ROUTER_OWNED = frozenset({"host", "port", "alias", "model"})


@dataclass(frozen=True)
class Member:
    """One pool member as the router loads it: the id clients send, its file, its flags."""

    model_id: str
    path: str
    args: Sequence[str]  # llama_server_args of the member, as if it ran alone
    load_on_startup: bool = False


def flag_pairs(args: Sequence[str]) -> list[tuple[str, str]]:
    """``--key value`` and ``--flag`` arguments as (key, value) pairs ("true" for a flag)."""
    pairs: list[tuple[str, str]] = []
    i = 0
    while i < len(args):
        key = args[i]
        if not key.startswith("--"):
            raise ValueError(f"{key!r} is not a --flag (arguments: {' '.join(args)})")
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            pairs.append((key[2:], args[i + 1]))
            i += 2
        else:
            pairs.append((key[2:], "true"))
            i += 1
    return pairs


def _value(text: str) -> str:
    if "\n" in text or text != text.strip():
        raise ValueError(f"{text!r} cannot be written to an INI preset")
    return text


def models_preset(members: Sequence[Member]) -> str:
    """The --models-preset INI: a section per member, named by its modelId.

    Each member gets the flags it would run with alone, less those the router sets. Its
    warm-up run is skipped: the request that asked for the model is the one waiting.
    """
    lines = ["version = 1", ""]
    for member in members:
        lines.append(f"[{_value(member.model_id)}]")
        lines.append(f"model = {_value(member.path)}")
        for key, value in flag_pairs(member.args):
            if key not in ROUTER_OWNED:
                lines.append(f"{key} = {_value(value)}")
        lines.append("warmup = false")
        if member.load_on_startup:
            lines.append("load-on-startup = true")
        lines.append("")
    return "\n".join(lines)


def router_args(host: str, port: int, preset: str, max_loaded: int) -> list[str]:
    """The router process itself: it loads members on demand, at most ``max_loaded``."""
    return ["--host", host, "--port", str(port), "--models-preset", preset,
            "--models-max", str(max_loaded)]


# The router's log (llama.cpp's server-models.cpp): each member it starts is announced with
# its port, and that process's lines are forwarded prefixed with the port, "[43775] ...";
# an error line has the level "E" after its timestamp.
_SPAWNED = re.compile(r"spawning server instance with name=(?P<name>\S+) on port (?P<port>\d+)")
_ERROR = re.compile(r"^\[\s*(?P<port>\d+)\]\s+\S+\s+E\s+(?P<text>.*)$")
_CAUSE = re.compile(r"error loading model: (?P<why>.+)$")
REASON_CHARS = 300


def load_error(log: str, model_id: str) -> str | None:
    """Why the router's last start of ``model_id`` failed, from the router's log, if said.

    The engine's own words: its "error loading model: ..." line, else its first error line
    (a bad flag, a file it cannot open). None when the log holds no start of the member or
    no error of that start (it was cut, or the process was killed).
    """
    lines = log.splitlines()
    port = None
    start = 0
    for index, line in enumerate(lines):
        spawned = _SPAWNED.search(line)
        if spawned and spawned["name"] == model_id:
            port, start = spawned["port"], index + 1
    if port is None:
        return None
    exited = f"instance name={model_id} exited"
    end = next((i for i in range(start, len(lines)) if exited in lines[i]), len(lines))
    errors = [m["text"].strip() for m in map(_ERROR.match, lines[start:end])
              if m is not None and m["port"] == port]
    for text in errors:
        cause = _CAUSE.search(text)
        if cause:
            return cause["why"].strip()[:REASON_CHARS]
    return _without_origin(errors[0])[:REASON_CHARS] if errors else None


def _without_origin(text: str) -> str:
    """``srv    load_model: failed to ...`` -> ``failed to ...`` (the function that said it)."""
    return re.sub(r"^(\w+\s+)?\w+:\s+", "", text, count=1)
