"""Guard models asked by the MCP server: a judge's completion or a moderation, at its endpoint.

The MCP server calls a model at its endpoint rather than through the router, so a guard's
judge or moderation model is found the same way: any model its sources know that serves
now, exposed as a tool or not, by the name the guard gives (modelId or namespace/name).
Asked on its OpenAI-compatible API (``/completions``, greedy and short; ``/moderations``),
as the gateway asks it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from llm_operator.guardrails.judges import answer_text, verdict_request
from llm_operator.guardrails.moderation import moderation_request
from llm_operator.guardrails.runner import JudgeFailed
from llm_operator.registry.catalog import Catalog


@dataclass
class CatalogJudges:
    """The MCP server's JudgeClient (guardrails/runner.py): guard models from its catalog.

    A call goes to the guard model's own endpoint (its router), whose flow control and
    limits apply to it: ``caller`` is not needed here.
    """

    catalog: Catalog
    http: Callable[[], aiohttp.ClientSession | None]  # the app's session, while it runs

    async def complete(self, model: str, prompt: str, timeout: float,
                       caller: object = None) -> str:
        """The judge's answer to ``prompt``; JudgeFailed (why, never the prompt) if none."""
        raw = await self._ask(model, "judge", "/completions",
                              lambda model_id: verdict_request(model_id, prompt), timeout)
        try:
            text = answer_text(raw)
        except (ValueError, LookupError, TypeError) as exc:
            raise JudgeFailed(f"{model}: {type(exc).__name__}") from None
        if not isinstance(text, str):
            raise JudgeFailed(f"{model}: the answer has no text")
        return text

    async def moderate(self, model: str, texts: Sequence[str], timeout: float,
                       caller: object = None) -> bytes:
        """The moderation endpoint's answer about ``texts``; JudgeFailed (why) if none."""
        return await self._ask(model, "moderation", "/moderations",
                               lambda model_id: moderation_request(model_id, texts), timeout)

    async def _ask(self, model: str, role: str, path: str,
                   body: Callable[[str], dict[str, Any]], timeout: float) -> bytes:
        served = self.catalog.served(model)
        if served is None:
            raise JudgeFailed(f"the {role} model {model!r} is not serving among the models "
                              "this MCP server reads")
        http = self.http()
        if http is None:
            raise JudgeFailed("the MCP server is not running")
        url = f"{served.endpoint.rstrip('/')}{path}"
        try:
            async with http.post(url, json=body(served.model_id),
                                 timeout=aiohttp.ClientTimeout(total=timeout)) as answer:
                if answer.status != 200:
                    raise JudgeFailed(f"{model}: HTTP {answer.status}")
                return await answer.read()
        except aiohttp.ClientError as exc:
            raise JudgeFailed(f"{model}: {type(exc).__name__}") from None
