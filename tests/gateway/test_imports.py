"""What a gateway's start imports: Redis's client only where Redis is configured."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys
from llm_operator.gateway.app import Gateway
from llm_operator.gateway.config import parse_config
import llm_operator.router.app
config = {{"routes": [{{"models": ["m"], "upstream": {{"baseUrl": "http://127.0.0.1:9/v1"}}}}]}}
config.update({extra})
Gateway(parse_config(config))
print("redis" in sys.modules)
"""

# (case, what the config adds, whether redis is imported)
CONFIGS = [
    ("no shared state", {}, False),
    ("a SQLite batch store", {"batch": {"path": "/tmp/llmop-probe-batches.db"}}, False),
    ("limits in Redis", {"redis": {"url": "redis://127.0.0.1:9"}}, True),
]


@pytest.mark.parametrize(("case", "extra", "imported"), CONFIGS, ids=[c[0] for c in CONFIGS])
def test_redis_is_imported_only_where_the_config_names_it(case: str, extra: dict[str, object],
                                                          imported: bool) -> None:
    """~0.2 s of every `llmop up`, `llmop gateway` and router pod start, and otel's metrics
    SDK with it, for what most configs never use."""
    said = subprocess.run([sys.executable, "-c", PROBE.format(extra=extra)],
                          capture_output=True, text=True, check=True).stdout.split()
    assert said[-1] == str(imported)
