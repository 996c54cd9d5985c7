"""Who holds the MCP server's stateful (2025-era) sessions, and how many each may open."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

DEFAULT_PER_CLIENT = 32  # sessions one client address may hold open
DEFAULT_IDLE_SECONDS = 300.0  # a session with no request and no open stream this long ends


@dataclass
class SessionLedger:
    """Sessions by client address, so one client cannot take every session there is.

    The SDK caps sessions globally (10,000 by default): one client that opens that many
    locked every other 2025-era client out until they expired. Here each address may hold
    ``per_client``, counting those still being opened (a burst of concurrent initializes
    cannot overshoot); sessions the SDK no longer has (deleted, expired) are forgotten on the
    next admission.
    """

    per_client: int = DEFAULT_PER_CLIENT
    _owner: dict[str, str] = field(default_factory=dict)  # session id -> client address
    _held: dict[str, set[str]] = field(default_factory=dict)  # client -> its session ids
    _pending: dict[str, int] = field(default_factory=dict)  # client -> sessions being opened

    def admit(self, client: str, live: Collection[str]) -> bool:
        """Reserve a place for a new session of ``client``; False at its limit.

        ``live`` are the SDK's current session ids. A reservation becomes the session
        (``opened``) or is handed back (``release``) once the response says which.
        """
        for sid in [s for s in self._held.get(client, ()) if s not in live]:
            self.forget(sid)
        if self.holding(client) >= self.per_client:
            return False
        self._pending[client] = self._pending.get(client, 0) + 1
        return True

    def release(self, client: str) -> None:
        left = self._pending.get(client, 0) - 1
        if left > 0:
            self._pending[client] = left
        else:
            self._pending.pop(client, None)

    def opened(self, client: str, sid: str) -> None:
        self.release(client)
        self._owner[sid] = client
        self._held.setdefault(client, set()).add(sid)

    def forget(self, sid: str) -> None:
        client = self._owner.pop(sid, None)
        if client is None:
            return
        held = self._held.get(client)
        if held is not None:
            held.discard(sid)
            if not held:
                del self._held[client]

    def holding(self, client: str) -> int:
        """Sessions ``client`` holds or is opening."""
        return len(self._held.get(client, ())) + self._pending.get(client, 0)

    def __len__(self) -> int:
        return len(self._owner)
