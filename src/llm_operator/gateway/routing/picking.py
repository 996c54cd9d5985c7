"""Which replica a request goes to first: least load, or by prompt prefix with bounded load."""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

BLOCK_CHARS = 256  # the prefix index's unit: prompts that share a block share its digest
TAILS = 64  # partial blocks kept per chain and replica: conversations on one system prompt


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
    answer_seconds: float = 0.0  # moving average of how long its answers took

    def answered(self, seconds: float) -> None:
        """Count one finished answer into the moving average (the last ~10 weigh most)."""
        self.answer_seconds = seconds if not self.answer_seconds else \
            0.9 * self.answer_seconds + 0.1 * seconds

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
    cap = _cap(ranked, loads, bound)
    first = next((n for n in ranked if loads[n].busy + 1 <= cap), ranked[0])
    return [first, *(n for n in ranked if n != first)]


def _cap(names: Sequence[str], loads: Mapping[str, Load], bound: float) -> int:
    """Most requests one replica may hold: ``bound`` times the average, this one counted."""
    total = sum(loads[n].busy for n in names) + 1
    return math.ceil(bound * total / len(names))


def prefix_blocks(text: str, block: int = BLOCK_CHARS) -> list[bytes]:
    """Chained digests of ``text``'s whole blocks: the i-th names the first i+1 blocks.

    As an engine's prefix cache keys its KV blocks: two prompts share the digests of the
    blocks they have in common from the start, and none after they differ.
    """
    out: list[bytes] = []
    previous = b""
    for start in range(0, len(text) - block + 1, block):
        previous = hashlib.blake2b(previous + text[start:start + block].encode(),
                                   digest_size=8).digest()
        out.append(previous)
    return out


class PrefixIndex:
    """Which replicas were recently sent which prompts: a guess at their prefix caches.

    The router sees every prompt it sends, so it knows what each replica has computed
    (until the engine evicts it). Prompts are kept as chains of whole-block digests
    (prefix_blocks) plus the partial block each ended with, so that a conversation's next
    turn, which extends its last prompt, finds the replica that was sent it. The
    ``capacity`` most recently used entries are kept.
    """

    def __init__(self, capacity: int = 20_000, block: int = BLOCK_CHARS) -> None:
        self.capacity, self.block = capacity, block  # 20,000 blocks: ~5 MB at most
        self._holders: OrderedDict[bytes, set[str]] = OrderedDict()
        # the partial blocks prompts ended with, after each chain: the latest per replica;
        # at most capacity // 4 of them in all
        self._tails: OrderedDict[bytes, dict[str, deque[str]]] = OrderedDict()
        self._tail_count = 0

    def __len__(self) -> int:
        """Entries held: block digests and partial blocks."""
        return len(self._holders) + self._tail_count

    def matched(self, text: str, names: Sequence[str],
                blocks: Sequence[bytes] | None = None) -> dict[str, float]:
        """For each replica, how many of the prompt's leading blocks it was sent.

        Half a block more for the replica whose last prompt this one extends within its
        partial block (the previous turn of the same conversation). ``blocks``: the
        text's prefix_blocks, when the caller has them.
        """
        if blocks is None:
            blocks = prefix_blocks(text, self.block)
        counts: dict[str, float] = dict.fromkeys(names, 0.0)
        alive = set(names)
        depth = 0
        for digest in blocks:
            holding = alive & self._holders.get(digest, set())
            if not holding:
                break
            alive, depth = holding, depth + 1
            for name in alive:
                counts[name] += 1
        rest = text[depth * self.block:]
        tails = self._tails.get(blocks[depth - 1] if depth else b"", {})
        for name in alive:
            if any(rest.startswith(tail) for tail in tails.get(name, ())):
                counts[name] += 0.5
        return counts

    def record(self, text: str, name: str, blocks: Sequence[bytes] | None = None) -> None:
        """``name`` was sent the prompt ``text`` (made of ``blocks``, when known)."""
        if blocks is None:
            blocks = prefix_blocks(text, self.block)
        for digest in blocks:
            holders = self._holders.get(digest)
            if holders is None:
                self._holders[digest] = {name}
            else:
                holders.add(name)
                self._holders.move_to_end(digest)
        tail = text[len(blocks) * self.block:]
        if tail:
            key = blocks[-1] if blocks else b""
            ended = self._tails.setdefault(key, {}).setdefault(name, deque(maxlen=TAILS))
            if tail not in ended:
                self._tail_count += len(ended) < TAILS
                ended.append(tail)
            self._tails.move_to_end(key)
        while len(self._holders) > self.capacity:
            self._holders.popitem(last=False)
        while self._tail_count > self.capacity // 4:
            _, dropped = self._tails.popitem(last=False)
            self._tail_count -= sum(len(d) for d in dropped.values())


def prefix_cache_order(text: str, names: Sequence[str], loads: Mapping[str, Load],
                       bound: float, index: PrefixIndex) -> list[str]:
    """Replicas for a prompt: the one holding most of its prefix, unless over its share.

    Ranked by how much of the prompt's beginning each replica was sent (most first), then
    by load, then by rendezvous hashing of the prompt's start (so new prefixes spread, and
    the same one lands alike). A replica over ``bound`` times the average share is passed
    over for the next. A prefix every replica holds (one system prompt for everyone) is
    spread by load. The first choice is recorded in ``index``.
    """
    if not names:
        return []
    blocks = prefix_blocks(text, index.block)  # once per request: matched, then recorded
    matched = index.matched(text, names, blocks)
    seed = text[:index.block]
    ranked = sorted(names, key=lambda n: (-matched[n], loads[n].busy, loads[n].kv_usage,
                                          _score(seed, n)))
    cap = _cap(ranked, loads, bound)
    first = next((n for n in ranked if loads[n].busy + 1 <= cap), ranked[0])
    index.record(text, first, blocks)
    return [first, *(n for n in ranked if n != first)]
