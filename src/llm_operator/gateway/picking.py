"""Which replica a request goes to first: least load, or prefix hash with bounded load."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass
class Load:
    """What one replica is doing: our requests in flight and its engine's own queue.

    ``in_flight`` is counted by the gateway as requests go out and answers end; the
    engine's numbers are scraped from its metrics (vLLM's ``vllm:num_requests_waiting``,
    ``vllm:num_requests_running``, ``vllm:kv_cache_usage_perc``) and include requests
    other routers sent.
    """

    in_flight: int = 0
    waiting: float = 0.0
    running: float = 0.0
    kv_usage: float = 0.0  # 0..1

    @property
    def busy(self) -> float:
        """Requests ahead of a new one: ours in flight, or the engine's, whichever is more.

        The engine's running count includes ours once they arrive; the larger of the two
        counts neither twice.
        """
        return max(float(self.in_flight), self.running) + self.waiting


def least_loaded(names: Sequence[str], loads: Mapping[str, Load], turn: int = 0) -> list[str]:
    """Replicas from the least busy; ties (then fuller KV caches) broken by ``turn``.

    Rotating ties by ``turn`` spreads requests over idle replicas instead of always
    choosing the first.
    """
    count = len(names)
    return [names[i] for i in sorted(
        range(count), key=lambda i: (loads[names[i]].busy, loads[names[i]].kv_usage,
                                     (i - turn) % count))]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: the text ones
        return "".join(p.get("text", "") for p in content
                       if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def prefix_text(body: Mapping[str, Any], chars: int) -> str:
    """The first ``chars`` characters a request shares with others that begin alike.

    The model (an adapter's name included), then the messages' roles and text in order,
    or the completion prompt: what an engine's prefix cache would reuse.
    """
    parts = [str(body.get("model", "")), "\0"]
    size = 0
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in messages:
            if not isinstance(message, dict):
                continue
            piece = f"{message.get('role', '')}:{_text(message.get('content'))}\n"
            parts.append(piece)
            size += len(piece)
            if size >= chars:
                break
    else:
        prompt = body.get("prompt")
        parts.append(prompt if isinstance(prompt, str) else "")
    head = "".join(parts)
    return head[:len(parts[0]) + 1 + chars]


def _score(key: str, name: str) -> bytes:
    return hashlib.blake2b(f"{key}\0{name}".encode(), digest_size=8).digest()


def prefix_order(key: str, names: Sequence[str], loads: Mapping[str, Load],
                 bound: float) -> list[str]:
    """Replicas for a prefix: its own first unless that one is over its share of the load.

    Rendezvous hashing ranks the replicas for the key (removing a replica moves only the
    keys it had). Bounded load: a replica is skipped while it holds more than ``bound``
    times the average share of requests in flight (counting this one), so one hot prefix
    cannot pile onto one replica; the next in the key's ranking takes it.
    """
    ranked = sorted(names, key=lambda n: _score(key, n), reverse=True)
    if not ranked:
        return []
    total = sum(loads[n].busy for n in ranked) + 1
    cap = math.ceil(bound * total / len(ranked))
    first = next((n for n in ranked if loads[n].busy + 1 <= cap), ranked[0])
    return [first, *(n for n in ranked if n != first)]
