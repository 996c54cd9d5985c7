"""What a gateway's start imports: Redis's client only where Redis is configured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = """
import json, sys
from llm_operator.gateway.app import Gateway
from llm_operator.gateway.settings.config import parse_config
import llm_operator.router.app
config = {"routes": [{"models": ["m"], "upstream": {"baseUrl": "http://127.0.0.1:9/v1"}}]}
config.update(json.loads(sys.argv[1]))
gateway = Gateway(parse_config(config))
gateway.serve_batches(lambda: "http://127.0.0.1:9", autostart=False)
print("redis" in sys.modules)
"""
REDIS = {"url": "redis://127.0.0.1:9"}  # nothing listens: the clients connect on first use

# (case, what the config adds, whether redis is imported)
CONFIGS = [
    ("no shared state", {}, False),
    ("a SQLite batch store", {"batch": {"enabled": True, "path": "{tmp}/batches.db"}}, False),
    ("limits in Redis", {"redis": REDIS}, True),
    ("limits and the batch store in Redis", {"redis": REDIS, "batch": {"enabled": True}},
     True),
]


@pytest.mark.parametrize(("case", "extra", "imported"), CONFIGS, ids=[c[0] for c in CONFIGS])
def test_redis_is_imported_only_where_the_config_names_it(
        case: str, extra: dict[str, object], imported: bool, tmp_path: Path) -> None:
    """~0.2 s of every `llmop up`, `llmop gateway` and router pod start, and otel's metrics
    SDK with it, for what most configs never use."""
    added = json.dumps(extra).replace("{tmp}", str(tmp_path))
    said = subprocess.run([sys.executable, "-c", PROBE, added], capture_output=True,
                          text=True, check=True).stdout.split()
    assert said[-1] == str(imported)
