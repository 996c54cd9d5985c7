"""Wake: an engine that takes turns (vLLM's sleep mode, a pool's member) is woken first.

After the request has its slot, before it is sent: a route with ``sleep`` names the group
its engine shares an accelerator with (gateway/routing/sleepers.py). An awake engine is counted
and the request goes on at once; an asleep one waits while the group makes room and wakes
it, and a change that fails answers 503 saying which engine and why. The request counts in
its engine until its answer ends (``Awake.release``), so that no engine is put to sleep
under a request.
"""

from __future__ import annotations

from aiohttp import web

from llm_operator.gateway.errors import error_response
from llm_operator.gateway.path.exchange import Exchange
from llm_operator.gateway.routing.sleepers import SleepError, Sleepers, SleepGroup, engine_key

RETRY_SECONDS = "5"


class Awake:
    """A request counted in its engine until ``release`` (idempotent)."""

    __slots__ = ("_group", "_url")

    def __init__(self, group: SleepGroup | None, url: str) -> None:
        self._group, self._url = group, url

    def release(self) -> None:
        group, self._group = self._group, None
        if group is not None:
            group.leave(self._url)


NOT_TAKING_TURNS = Awake(None, "")  # a route whose engine has the accelerator to itself


class Wake:
    """The request's engine awake: at once (``now``), or after the group's change (``wait``)."""

    def __init__(self, sleepers: Sleepers) -> None:
        self.sleepers = sleepers

    def _engine(self, ex: Exchange) -> tuple[SleepGroup, str] | None:
        """The request's group and engine; None where it takes no turns.

        Or no longer: its route was reconfigured away while the request came through.
        """
        sleep = ex.state.route.sleep
        if sleep is None:
            return None
        group = self.sleepers.groups.get(sleep.group)
        url = engine_key(ex.state.route)
        return (group, url) if group is not None and url in group.engines else None

    def now(self, ex: Exchange) -> Awake | None:
        """Counted in an awake engine (or one not taking turns); None: ``wait`` must."""
        found = self._engine(ex)
        if found is None:
            return NOT_TAKING_TURNS
        group, url = found
        return Awake(group, url) if group.enter_now(url) else None

    async def wait(self, ex: Exchange) -> Awake | web.Response:
        """The engine woken (another put to sleep first if need be), or a 503 saying why."""
        found = self._engine(ex)
        if found is None:  # reconfigured away since now()
            return NOT_TAKING_TURNS
        group, url = found
        try:
            if ex.trace is None or not ex.trace.recording:
                await group.enter(url)
            else:
                with ex.trace.span("llmop.wake", {"llmop.sleep_group": group.name}):
                    await group.enter(url)
        except SleepError as exc:
            return error_response(
                503, f"{ex.state.route.label!r} is asleep and could not be woken: {exc}",
                "server_error", "engine_not_woken", headers={"Retry-After": RETRY_SECONDS})
        return Awake(group, url)
