"""The gateway of a benchmark config, with the web console at /ui/ over 100 synthetic models.

    python serve.py CONFIG.json PORT [IDLE_SECONDS]

The console's source holds 100 models (the guide's samples, renamed), the first routed as
the config's first route, so an open page reads that route's figures as it would live.
"""

from __future__ import annotations

import asyncio
import copy
import json
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from llm_operator.api.validation import parse_llmmodel  # noqa: E402
from llm_operator.console.pages import Console  # noqa: E402
from llm_operator.console.views import ModelState  # noqa: E402
from llm_operator.gateway.app import Gateway  # noqa: E402
from llm_operator.gateway.server.http import served  # noqa: E402
from llm_operator.gateway.settings.config import parse_config  # noqa: E402

from samples import GUIDE_SAMPLES, load_yaml  # noqa: E402


def hundred(first_route: str, count: int = 100) -> list[ModelState]:
    """``count`` models from the guide's samples, each with a name and modelId of its own."""
    docs = [load_yaml(p) for p in GUIDE_SAMPLES]
    states = []
    for index in range(count):
        doc = copy.deepcopy(docs[index % len(docs)])
        spec = doc["spec"]
        doc["metadata"]["name"] = f"model-{index:03d}"
        spec["modelId"] = f"{spec['modelId']}{index}" if "/" in spec["modelId"] \
            else f"{spec['modelId']}-{index}"
        if (spec.get("mcpExposure") or {}).get("enabled"):
            spec["mcpExposure"]["toolName"] = f"tool_{index}"
        states.append(ModelState(parse_llmmodel(doc), "Ready", "", 1, 1,
                                 first_route if index == 0 else f"route-{index}"))
    return states


class Hundred:
    def __init__(self, states: list[ModelState]) -> None:
        self.now = states

    def states(self) -> Sequence[ModelState]:
        return self.now


async def main(config_path: str, port: int, idle_seconds: float) -> None:
    config = parse_config(json.loads(Path(config_path).read_text()))
    gateway = Gateway(config)
    console = Console(Hundred(hundred(config.routes[0].label)), gateway.metrics.registry,
                      gateway_url=lambda: f"http://127.0.0.1:{port}", where="bench",
                      idle_seconds=idle_seconds)
    async with served(gateway.app(console.add_routes), 2) as listen:
        await listen("127.0.0.1", port)
        print("serving", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]),
                     float(sys.argv[3]) if len(sys.argv) > 3 else 120.0))
