"""On the real node: the router's Batch API, and a batch that outlives Redis's pod and every
router pod.

config/router-batch (two replicas, Redis for the state, a Lease for the runner) beside
config/redis, both as the overlays' headers say to apply them (Redis's append-only file on
a PersistentVolume). With the OpenAI SDK through the router's Service: a batch of Gemma
requests is created; while it runs, Redis's pod is deleted (the runner waits for the new
one and goes on), then every router pod (the replicas that replace them finish it); each
request appears once in the output.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator

import openai
import pytest
from e2e_cluster import (
    GEMMA_ID,
    MODELS_NS,
    OPERATOR_NS,
    NodeCluster,
    install_batching,
    uninstall_batching,
)
from openai.types import Batch
from pace import tokens_lasting

pytestmark = pytest.mark.e2e
ROUTER = "app=llmop-router"
# Gemma's one slot answers them one after another, each lasting about 2 s here (48 tokens
# took 4-6 s each on a slow 2-core host, ~90 s in all after the routers were replaced):
# long enough to interrupt twice (at 2 answers, then 2 more) with half of them left
LINES = 20


@pytest.fixture(scope="module")
def batching(gemma: NodeCluster) -> Iterator[NodeCluster]:
    """Redis and the router with the Batch API, sharing one password (for this module)."""
    install_batching(gemma)
    yield gemma
    uninstall_batching(gemma)


async def until_batch(sdk: openai.AsyncOpenAI, batch_id: str, check: Callable[[Batch], bool],
                      timeout: float = 240) -> Batch:
    """Until the batch, as the router answers for it, passes ``check``."""
    async with asyncio.timeout(timeout):
        while True:
            try:
                batch = await sdk.batches.retrieve(batch_id)
            except (openai.APIConnectionError, openai.InternalServerError):
                batch = None  # the router's pods are being replaced
            if batch is not None and check(batch):
                return batch
            await asyncio.sleep(0.5)  # the batch runs in another process: poll it


def completed(batch: Batch) -> int:
    return batch.request_counts.completed if batch.request_counts is not None else 0


async def test_a_batch_finishes_once_after_redis_and_every_router_pod_are_replaced(
        batching: NodeCluster) -> None:
    base = batching.service_url(OPERATOR_NS, "llmop-router", 8080)
    async with openai.AsyncOpenAI(base_url=base, api_key="unused", timeout=60,
                                  max_retries=3) as sdk:
        each = max(8, await tokens_lasting(sdk, 2))
        lines = [{"custom_id": f"q{i}", "method": "POST", "url": "/v1/chat/completions",
                  "body": {"model": GEMMA_ID, "max_tokens": each, "temperature": 0,
                           "ignore_eos": True,  # llama.cpp: each answer takes as long
                           "messages": [{"role": "user", "content": f"Count to {i + 2}."}]}}
                 for i in range(LINES)]
        data = "".join(json.dumps(line) + "\n" for line in lines).encode()
        uploaded = await sdk.files.create(file=("eval.jsonl", data), purpose="batch")
        batch = await sdk.batches.create(input_file_id=uploaded.id,
                                         endpoint="/v1/chat/completions",
                                         completion_window="24h")
        await until_batch(sdk, batch.id, lambda b: completed(b) >= 2)
        batching.kubectl("-n", MODELS_NS, "delete", "pod", "llmop-redis-0", "--wait=true")
        since = completed(await until_batch(sdk, batch.id, lambda b: True))
        assert 2 <= since < LINES - 2  # what was recorded before Redis's pod went is kept
        going = await until_batch(sdk, batch.id, lambda b: completed(b) >= since + 2)
        assert going.status == "in_progress"  # the router pods go while it runs
        before = set(batching.kubectl("-n", OPERATOR_NS, "get", "pods", "-l", ROUTER, "-o",
                                      "jsonpath={.items[*].metadata.name}").split())
        batching.kubectl("-n", OPERATOR_NS, "delete", "pods", "-l", ROUTER, "--wait=false")
        batching.kubectl("-n", OPERATOR_NS, "rollout", "status", "deployment/llmop-router",
                         "--timeout=180s")
        after = set(batching.kubectl("-n", OPERATOR_NS, "get", "pods", "-l", ROUTER,
                                     "--field-selector=status.phase=Running", "-o",
                                     "jsonpath={.items[*].metadata.name}").split())
        assert after and not after & before  # every pod that ran the batch is gone
        done = await until_batch(sdk, batch.id, lambda b: b.status in {
            "completed", "failed", "expired", "cancelled"})
        assert done.status == "completed", done
        assert done.output_file_id is not None
        output = (await sdk.files.content(done.output_file_id)).text
    answers = [json.loads(line) for line in output.splitlines()]
    assert [a["custom_id"] for a in answers] == [f"q{i}" for i in range(LINES)]
    assert all(a["response"]["status_code"] == 200 for a in answers)
    assert done.request_counts is not None and done.request_counts.completed == LINES
    lease = json.loads(batching.kubectl("-n", OPERATOR_NS, "get", "lease",
                                        "llmop-router-batches", "-o", "json"))
    assert lease["spec"]["holderIdentity"] in after | {None}  # a new pod runs batches
