"""Other APIs the gateway speaks: Anthropic and Gemini upstreams, Anthropic's Messages in.

Pure translation (no I/O). ``NATIVE`` maps an upstream's ``api`` to its translator; an
``openai`` upstream has none (bodies pass through). ``messages_api`` turns a client's
Anthropic Messages request into OpenAI chat; ``sse`` reads event streams; ``assembling``
builds a plain answer from a stream. Imports nothing else of the gateway.
"""

from __future__ import annotations

from llm_operator.gateway.providers.anthropic import AnthropicApi
from llm_operator.gateway.providers.gemini import GeminiApi
from llm_operator.gateway.providers.shapes import (
    NativeApi,
    StreamAdapter,
    Translated,
    Untranslatable,
)

NATIVE: dict[str, NativeApi] = {"anthropic": AnthropicApi(), "gemini": GeminiApi()}

__all__ = ["NATIVE", "NativeApi", "StreamAdapter", "Translated", "Untranslatable"]
