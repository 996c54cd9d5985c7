"""Each LoRA adapter is an MCP tool of its own, called the way its engine selects it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from llm_operator.mcp_server.run import service
from llm_operator.mcp_server.settings import McpSettings
from mcp import Client

from fake_upstream import FakeUpstream
from mcptools import serving
from samples import sample_doc

HI = [{"role": "user", "content": "hi"}]


def _serving(doc: dict[str, Any], endpoint: str) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    out["status"] = {"phase": "Ready", "endpoint": endpoint}
    return out


async def test_adapters_are_listed_and_called_by_their_engines_means(
        tmp_path: Path, upstream: tuple[FakeUpstream, str]) -> None:
    fake, endpoint = upstream
    models = tmp_path / "models"
    models.mkdir()
    for stem in ("llama32-3b-lora-nvidia", "llamacpp-lora-cpu"):
        (models / f"{stem}.yaml").write_text(yaml.safe_dump(_serving(sample_doc(stem),
                                                                     endpoint)))
    async with service(McpSettings(), files=models) as svc, serving(svc) as url, \
            Client(f"{url}/mcp") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) >= {"llama32_3b", "llama32_3b.text2sql", "llama32_3b.support-tone",
                              "llama32_3b.legal-summaries", "qwen25_1b", "qwen25_1b.pirate"}
        assert tools["llama32_3b.text2sql"].description == \
            "Write a SQL query for a question about a table schema."
        assert tools["llama32_3b.support-tone"].description == (
            "Chat with meta-llama/Llama-3.2-3B-Instruct through its LoRA adapter "
            "support-tone (llama32-3b-lora).")

        # vLLM serves each adapter under its own model name
        assert not (await client.call_tool("llama32_3b.text2sql", {"messages": HI})).is_error
        assert fake.requests[-1]["body"]["model"] == "text2sql"
        # llama-server: the base model, with the adapter applied by id for this request
        assert not (await client.call_tool("qwen25_1b.pirate", {"messages": HI})).is_error
        body = fake.requests[-1]["body"]
        assert body["model"] == "Qwen/Qwen2.5-1.5B-Instruct-GGUF"
        assert body["lora"] == [{"id": 0, "scale": 1.0}]
        # the model itself, without any adapter
        assert not (await client.call_tool("qwen25_1b", {"messages": HI})).is_error
        assert "lora" not in fake.requests[-1]["body"]

        listed = await client.call_tool("list_available_models", {})
        entries = {m["toolName"]: m for m in (listed.structured_content or {})["models"]}
        assert entries["llama32_3b.text2sql"]["modelId"] == "text2sql"
        assert entries["llama32_3b.text2sql"]["adapterOf"] == \
            "meta-llama/Llama-3.2-3B-Instruct"
