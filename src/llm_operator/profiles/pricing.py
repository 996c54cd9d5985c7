"""List prices (USD per million tokens) of the guide's frontier models, for cost metrics."""

from __future__ import annotations

from types import MappingProxyType

# modelId -> (input, output) USD per 1M tokens, from the guide's chapter 2 (May 2026).
PRICES: MappingProxyType[str, tuple[float, float]] = MappingProxyType({
    "gpt-5.5": (5.0, 30.0),
    "gpt-5.5-pro": (30.0, 180.0),
    "claude-opus-4-7": (5.0, 25.0),
    "gemini-3.1-pro": (2.0, 12.0),
})


def price(model_id: str) -> tuple[float, float] | None:
    """Known (input, output) price per million tokens, or None."""
    return PRICES.get(model_id)
