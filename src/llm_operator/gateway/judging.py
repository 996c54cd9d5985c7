"""Guard models asked through the gateway's own routes: a judge's text completion, a moderation.

A judge or a moderation endpoint is any routed model: its deployments are tried in the
route's order on their OpenAI-compatible API (``/completions``, ``/moderations``; a native
Anthropic or Gemini API has neither), with the route's credentials, a judge greedy and
short. The calls are the gateway's own: no client key, no flow-control slot, no limits;
they are few (one per guarded request, or one per risk).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import aiohttp

from llm_operator.gateway.keys import KeyUnavailable
from llm_operator.gateway.routes import RouteTable
from llm_operator.guardrails.judges import answer_text, verdict_request
from llm_operator.guardrails.moderation import moderation_request
from llm_operator.guardrails.runner import JudgeFailed

T = TypeVar("T")


def _raw(raw: bytes) -> bytes:
    return raw


class RouteJudges:
    """The gateway's JudgeClient (guardrails/runner.py)."""

    def __init__(self, table: RouteTable) -> None:
        self.table = table
        self._http: aiohttp.ClientSession | None = None

    async def complete(self, model: str, prompt: str, timeout: float) -> str:
        """The judge's answer to ``prompt``; JudgeFailed (why, never the prompt) if none."""
        return await self._ask(model, "judge", "/completions",
                               lambda upstream: verdict_request(upstream, prompt),
                               timeout=timeout, read=answer_text)

    async def moderate(self, model: str, texts: Sequence[str], timeout: float) -> bytes:
        """The moderation endpoint's answer about ``texts``; JudgeFailed (why) if none."""
        return await self._ask(model, "moderation", "/moderations",
                               lambda upstream: moderation_request(upstream, texts),
                               timeout=timeout, read=_raw)

    async def _ask(self, model: str, role: str, path: str,
                   body: Callable[[str], dict[str, Any]], *, timeout: float,
                   read: Callable[[bytes], T | None]) -> T:
        """``read`` of the first deployment's 200 answer at ``path`` (None: it has no text).

        ``body``: the request for the deployment's upstream model id.
        """
        state = self.table.routes.get(model)
        if state is None:
            raise JudgeFailed(f"the {role} model {model!r} is not served here")
        deployments = state.order(random.random())
        if not deployments:
            raise JudgeFailed(f"the {role} model {model!r} has no replica now")
        if self._http is None:
            self._http = aiohttp.ClientSession()
        failures = []
        for deployment in deployments:
            if deployment.native is not None:
                failures.append(f"{deployment.label}: the {deployment.native.name} API has "
                                f"no {path.lstrip('/')} endpoint")
                continue
            try:
                async with self._http.post(
                        f"{deployment.url_base}{path}",
                        json=body(state.route.upstream_model(deployment.upstream)),
                        headers=deployment.auth_headers(),
                        timeout=aiohttp.ClientTimeout(total=timeout)) as answer:
                    if answer.status != 200:
                        failures.append(f"{deployment.label}: HTTP {answer.status}")
                        continue
                    got = read(await answer.read())
            except KeyUnavailable as exc:
                failures.append(f"{deployment.label}: {exc}")
                continue
            except (aiohttp.ClientError, ValueError, LookupError, TypeError) as exc:
                failures.append(f"{deployment.label}: {type(exc).__name__}")
                continue
            if got is not None:
                return got
            failures.append(f"{deployment.label}: the answer has no text")
        raise JudgeFailed("; ".join(failures))

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
