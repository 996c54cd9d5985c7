"""Judges asked through the gateway's own routes: a guard model's text completion.

A judge is any routed model: its deployments are tried in the route's order on their
OpenAI-compatible ``/completions`` API (a native Anthropic or Gemini API has none), with the
route's credentials, greedy and short. The calls are the gateway's own: no client key, no
flow-control slot, no limits; they are few (one per guarded request, or one per risk).
"""

from __future__ import annotations

import random

import aiohttp

from llm_operator.gateway.keys import KeyUnavailable
from llm_operator.gateway.routes import RouteTable
from llm_operator.guardrails.judges import answer_text, verdict_request
from llm_operator.guardrails.runner import JudgeFailed


class RouteJudges:
    """The gateway's JudgeClient (guardrails/runner.py)."""

    def __init__(self, table: RouteTable) -> None:
        self.table = table
        self._http: aiohttp.ClientSession | None = None

    async def complete(self, model: str, prompt: str, timeout: float) -> str:
        """The judge's answer to ``prompt``; JudgeFailed (why, never the prompt) if none."""
        state = self.table.routes.get(model)
        if state is None:
            raise JudgeFailed(f"the judge model {model!r} is not served here")
        deployments = state.order(random.random())
        if not deployments:
            raise JudgeFailed(f"the judge model {model!r} has no replica now")
        if self._http is None:
            self._http = aiohttp.ClientSession()
        failures = []
        for deployment in deployments:
            if deployment.native is not None:
                failures.append(f"{deployment.label}: the {deployment.native.name} API has "
                                "no text completions")
                continue
            body = verdict_request(state.route.upstream_model(deployment.upstream), prompt)
            try:
                async with self._http.post(
                        f"{deployment.url_base}/completions", json=body,
                        headers=deployment.auth_headers(),
                        timeout=aiohttp.ClientTimeout(total=timeout)) as answer:
                    if answer.status != 200:
                        failures.append(f"{deployment.label}: HTTP {answer.status}")
                        continue
                    text = answer_text(await answer.read())
            except KeyUnavailable as exc:
                failures.append(f"{deployment.label}: {exc}")
                continue
            except (aiohttp.ClientError, ValueError, LookupError, TypeError) as exc:
                failures.append(f"{deployment.label}: {type(exc).__name__}")
                continue
            if isinstance(text, str):
                return text
            failures.append(f"{deployment.label}: the answer has no text")
        raise JudgeFailed("; ".join(failures))

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
