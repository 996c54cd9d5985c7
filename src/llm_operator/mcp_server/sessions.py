"""Who holds the MCP server's stateful (2025-era) sessions, and how many each may keep."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass, field

DEFAULT_PER_CLIENT = 32  # sessions one client address may hold open
DEFAULT_IDLE_SECONDS = 300.0  # a session with no request and no open stream this long ends


@dataclass(frozen=True)
class Admission:
    """A new session's place: ``admitted``, and the session to end first for it, if any."""

    admitted: bool
    ends: str | None = None


@dataclass
class SessionLedger:
    """Sessions by client address, so one client cannot take every session there is.

    The SDK caps sessions globally (10,000 by default): one client that opens that many
    locked every other 2025-era client out until they expired. Here each address may hold
    ``per_client``, counting those still being opened (a burst of concurrent initializes
    cannot overshoot). At the cap a new session still gets in: the client's least recently
    used session with no request in flight and no open stream ends for it (its id then
    answers 404, and the spec has a client initialize again). Many clients open a session
    per run and never DELETE it (the MCP conformance suite, short-lived agent processes):
    they are bounded in memory, not locked out. Only a client whose every session is busy
    is refused. Sessions the SDK no longer has (deleted, expired) are forgotten on the
    next admission.
    """

    per_client: int = DEFAULT_PER_CLIENT
    _owner: dict[str, str] = field(default_factory=dict)  # session id -> client address
    # client -> its session ids, least recently used first
    _held: dict[str, OrderedDict[str, None]] = field(default_factory=dict)
    _pending: dict[str, int] = field(default_factory=dict)  # client -> sessions being opened
    _busy: dict[str, int] = field(default_factory=dict)  # session id -> requests in flight

    def admit(self, client: str, live: Collection[str]) -> Admission:
        """Reserve a place for a new session of ``client``, ending its LRU idle one if need be.

        ``live`` are the SDK's current session ids. A reservation becomes the session
        (``opened``) or is handed back (``release``) once the response says which. The
        session in ``ends`` is already forgotten here; the caller ends it in the SDK.
        """
        for sid in [s for s in self._held.get(client, ()) if s not in live]:
            self.forget(sid)
        ends = None
        if self.holding(client) >= self.per_client:
            ends = next((s for s in self._held.get(client, ()) if not self._busy.get(s)),
                        None)
            if ends is None:
                return Admission(False)
            self.forget(ends)
        self._pending[client] = self._pending.get(client, 0) + 1
        return Admission(True, ends)

    def release(self, client: str) -> None:
        _count_down(self._pending, client)

    def opened(self, client: str, sid: str) -> None:
        self.release(client)
        self._owner[sid] = client
        self._held.setdefault(client, OrderedDict())[sid] = None

    def begin(self, sid: str) -> None:
        """A request (or a GET stream) of session ``sid`` starts: it is busy and most recent."""
        client = self._owner.get(sid)
        if client is None:
            return
        self._busy[sid] = self._busy.get(sid, 0) + 1
        self._held[client].move_to_end(sid)

    def end(self, sid: str) -> None:
        """A request of ``sid`` is answered (or its stream closed)."""
        _count_down(self._busy, sid)

    def forget(self, sid: str) -> None:
        self._busy.pop(sid, None)
        client = self._owner.pop(sid, None)
        if client is None:
            return
        held = self._held.get(client)
        if held is not None:
            held.pop(sid, None)
            if not held:
                del self._held[client]

    def holding(self, client: str) -> int:
        """Sessions ``client`` holds or is opening."""
        return len(self._held.get(client, ())) + self._pending.get(client, 0)

    def __len__(self) -> int:
        return len(self._owner)


def _count_down(counts: dict[str, int], key: str) -> None:
    """One fewer of ``key``; none left: forgotten."""
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
