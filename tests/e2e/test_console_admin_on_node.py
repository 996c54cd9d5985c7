"""On the real node: config/router-admin's console administrator, through the router's
Service in Chromium.

The keys and the admin token are Secrets created as the overlay's header says. Signed in
with the token, a key is created, used with curl and disabled (refused after). The router
pod wrote the keys Secret itself, under the overlay's Role: it holds the key's digest,
never the key. A new router pod, reading the Secret as the kubelet mounts it, still
refuses the disabled key and admits it once the administrator enables it again.
config/router is put back after.
"""

from __future__ import annotations

import base64
import secrets
import subprocess
from collections.abc import Iterator

import pytest
import yaml
from e2e_cluster import E2E, OPERATOR_NS, NodeCluster

from llm_operator.access.keyring import digest

from browser import administer_keys, curl_models

pytestmark = pytest.mark.e2e
TOKEN = secrets.token_hex(16)
TEAM = f"sk-llmop-{secrets.token_hex(12)}"
ROUTER = "app=llmop-router"


def _secret(cluster: NodeCluster, name: str, literal: str) -> None:
    cluster.kubectl("apply", "-f", "-", stdin=cluster.kubectl(
        "-n", OPERATOR_NS, "create", "secret", "generic", name, f"--from-literal={literal}",
        "--dry-run=client", "-o", "yaml"))


def _replace_routers(cluster: NodeCluster, path: str) -> None:
    """Apply the overlay and wait until only its router pods serve."""
    earlier = cluster.kubectl("-n", OPERATOR_NS, "get", "pods", "-l", ROUTER,
                              "-o", "name").split()
    cluster.apply_kustomization(E2E / path, ["llmop-router"], OPERATOR_NS)
    if earlier:
        cluster.kubectl("-n", OPERATOR_NS, "wait", "--for=delete", "--timeout=120s",
                        *earlier)


@pytest.fixture(scope="module")
def administered(gemma: NodeCluster) -> Iterator[NodeCluster]:
    keys = yaml.safe_dump({"keys": [{"id": "team-a", "sha256": digest(TEAM)}]})
    _secret(gemma, "llmop-router-keys", f"keys.yaml={keys}")
    _secret(gemma, "llmop-router-admin", f"token={TOKEN}")
    _replace_routers(gemma, "router-admin")
    yield gemma
    _replace_routers(gemma, "router")
    gemma.kubectl("-n", OPERATOR_NS, "delete", "secret", "llmop-router-keys",
                  "llmop-router-admin", "--ignore-not-found")


def test_a_key_the_console_disables_stays_refused_by_a_new_router_pod(
        administered: NodeCluster) -> None:
    url = administered.service_url(OPERATOR_NS, "llmop-router", 8080, "")
    key = administer_keys(url, TOKEN, shots="node-")
    stored = administered.json("-n", OPERATOR_NS, "get", "secret", "llmop-router-keys")
    written = base64.b64decode(stored["data"]["keys.yaml"]).decode()
    assert key not in written and digest(key) in written
    assert [(k["id"], k.get("disabled", False)) for k in yaml.safe_load(written)["keys"]] == \
        [("team-a", False), ("ci", True)]
    _restart_routers(administered)
    url = administered.service_url(OPERATOR_NS, "llmop-router", 8080, "")
    assert (curl_models(url, key), curl_models(url, TEAM)) == ("401", "200")
    enabled = subprocess.run(
        ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST",
         f"{url}/ui/keys/ci/enable", "-H", f"Authorization: Bearer {TOKEN}",
         "-H", f"Origin: {url}"], check=True, capture_output=True, text=True, timeout=30)
    assert enabled.stdout == "303"  # done: back to the keys page, as a browser's form is
    assert curl_models(url, key) == "200"


def _restart_routers(cluster: NodeCluster) -> None:
    earlier = cluster.kubectl("-n", OPERATOR_NS, "get", "pods", "-l", ROUTER,
                              "-o", "name").split()
    cluster.kubectl("-n", OPERATOR_NS, "rollout", "restart", "deployment/llmop-router")
    cluster.kubectl("-n", OPERATOR_NS, "rollout", "status", "deployment/llmop-router",
                    "--timeout=120s")
    cluster.kubectl("-n", OPERATOR_NS, "wait", "--for=delete", "--timeout=120s", *earlier)
