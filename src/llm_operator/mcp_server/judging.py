"""Judges asked by the MCP server: a guard model's text completion at its own endpoint.

The MCP server calls a model at its endpoint rather than through the router, so a guard's
judge is found the same way: any model its sources know that serves now, exposed as a
tool or not, by the name the guard gives (modelId or namespace/name). Asked greedy and
short on the OpenAI-compatible ``/completions`` API, as the gateway asks it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from llm_operator.guardrails.judges import answer_text, verdict_request
from llm_operator.guardrails.runner import JudgeFailed
from llm_operator.registry.catalog import Catalog


@dataclass
class CatalogJudges:
    """The MCP server's JudgeClient (guardrails/runner.py): judges from its catalog."""

    catalog: Catalog
    http: Callable[[], aiohttp.ClientSession | None]  # the app's session, while it runs

    async def complete(self, model: str, prompt: str, timeout: float) -> str:
        """The judge's answer to ``prompt``; JudgeFailed (why, never the prompt) if none."""
        served = self.catalog.served(model)
        if served is None:
            raise JudgeFailed(f"the judge model {model!r} is not serving among the models "
                              "this MCP server reads")
        http = self.http()
        if http is None:
            raise JudgeFailed("the MCP server is not running")
        body = verdict_request(served.model_id, prompt)
        url = f"{served.endpoint.rstrip('/')}/completions"
        try:
            async with http.post(url, json=body,
                                 timeout=aiohttp.ClientTimeout(total=timeout)) as answer:
                if answer.status != 200:
                    raise JudgeFailed(f"{model}: HTTP {answer.status}")
                text = answer_text(await answer.read())
        except (aiohttp.ClientError, ValueError, LookupError, TypeError) as exc:
            raise JudgeFailed(f"{model}: {type(exc).__name__}") from None
        if not isinstance(text, str):
            raise JudgeFailed(f"{model}: the answer has no text")
        return text
