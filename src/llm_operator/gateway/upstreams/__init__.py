"""Native provider APIs behind the gateway: OpenAI chat in, each provider's own API out.

Pure translation (no I/O). ``NATIVE`` maps an upstream's ``api`` to its translator; an
``openai`` upstream has none (bodies pass through).
"""

from __future__ import annotations

from llm_operator.gateway.upstreams.anthropic import AnthropicApi
from llm_operator.gateway.upstreams.gemini import GeminiApi
from llm_operator.gateway.upstreams.shapes import (
    NativeApi,
    StreamAdapter,
    Translated,
    Untranslatable,
)

NATIVE: dict[str, NativeApi] = {"anthropic": AnthropicApi(), "gemini": GeminiApi()}

__all__ = ["NATIVE", "NativeApi", "StreamAdapter", "Translated", "Untranslatable"]
