"""Model pool on the real node: what one member's edit costs the others, read in place vs a roll.

On the test node (tests/realnode.py; needs root), installed as the e2e suite installs it,
with the router (tests/e2e/router), the pool of examples/cluster/model-pool held at one
replica. A client asks one member (gemma-3-270m-qa) through the router's Service, one
request after another, the whole time. Then, each in turn:

- **in place** (today): gemma-pool-long's engineArgs edited; the kubelet updates the
  preset in the running pod and its pool-reload container has llama-server's router read
  it (only that member is unloaded). The window ends when the pod's router holds the new
  preset;
- **baseline, a roll** (what any edit did before): the pool's Deployment restarted, as a
  changed pod template replaces the pod (maxSurge 0: the router holds requests while the
  new pod starts). The window ends when the new pod serves the member.

For the requests sent in each window (and the 5 s after): how many were answered and
failed, and their latency (median, max).

    sudo python bench/pool/edit.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "src"), str(REPO / "tests"), str(REPO / "tests" / "e2e"),
                str(REPO / "tools")]

import httpx2  # noqa: E402
import openai  # noqa: E402
from e2e_cluster import MODELS_NS, OPERATOR_NS, NodeCluster, installed  # noqa: E402

POOL = REPO / "examples" / "cluster" / "model-pool"
ENGINE = "gemma-small-pool"
MEMBERS = ("gemma-pool-qa", "gemma-pool-chat", "gemma-pool-long")
ASKED = "gemma-3-270m-qa"
PROMPT = "Q: What is the capital of France?\nA:"
AFTER_SECONDS = 5.0


class Asker:
    """One request after another for ASKED: (sent, seconds, answered) each."""

    def __init__(self, router: str) -> None:
        self.client = openai.OpenAI(base_url=router, api_key="unused", timeout=300,
                                    max_retries=0)
        self.done: list[tuple[float, float, bool]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._ask, daemon=True)

    def _ask(self) -> None:
        while not self.stop.is_set():
            sent = time.monotonic()
            try:
                answer = self.client.completions.create(model=ASKED, prompt=PROMPT,
                                                        max_tokens=8, stop=["\n"],
                                                        temperature=0)
                ok = "Paris" in answer.choices[0].text
            except openai.OpenAIError:
                ok = False
            self.done.append((sent, time.monotonic() - sent, ok))

    def between(self, start: float, end: float) -> list[tuple[float, float, bool]]:
        return [d for d in self.done if start <= d[0] <= end]


def pods(cluster: NodeCluster) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = cluster.json("-n", MODELS_NS, "get", "pods", "-l",
                                               "ai.example.io/pool=gemma-small")["items"]
    return found


def preset_holds(cluster: NodeCluster, key: str, value: str) -> bool:
    """Whether every pool pod's router holds gemma-3-270m-long's preset with key = value."""
    for pod in pods(cluster):
        ip = pod["status"].get("podIP")
        try:
            body = httpx2.get(f"http://{ip}:8000/models", timeout=5).json()
        except (httpx2.HTTPError, ValueError):
            return False
        member = next(m for m in body["data"] if m["id"] == "gemma-3-270m-long")
        preset = str(member["status"].get("preset", "")).splitlines()
        if not any(key in line and line.rstrip().endswith(value) for line in preset):
            return False
    return True


def in_place(cluster: NodeCluster, value: int) -> float:
    """Edit gemma-pool-long's flags; the moment its pod's router holds them."""
    cluster.kubectl("-n", MODELS_NS, "patch", "llmmodel", "gemma-pool-long", "--type=merge",
                    "-p", json.dumps({"spec": {"engineArgs": {"n-predict": str(value)}}}))
    while not preset_holds(cluster, "n-predict", str(value)):
        time.sleep(0.5)  # the kubelet and pool-reload are other processes: poll them
    return time.monotonic()


def rolled(cluster: NodeCluster) -> float:
    """Replace the pool's pod; the moment the new pod serves again."""
    cluster.kubectl("-n", MODELS_NS, "rollout", "restart", f"deployment/{ENGINE}")
    cluster.kubectl("-n", MODELS_NS, "rollout", "status", f"deployment/{ENGINE}",
                    "--timeout=300s")
    return time.monotonic()


def row(label: str, windows: list[list[tuple[float, float, bool]]], spans: list[float]
        ) -> str:
    sent = [d for w in windows for d in w]
    answered = [s for _, s, ok in sent if ok]
    failed = sum(1 for *_, ok in sent if not ok)
    median = statistics.median(answered) if answered else float("nan")
    return (f"| {label} | {statistics.median(spans):.1f} | {len(answered)} | {failed} | "
            f"{median:.2f} | {max(answered, default=float('nan')):.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, installed(Path(tmp)) as cluster:
        cluster.namespace(MODELS_NS)
        cluster.apply_kustomization(REPO / "tests" / "e2e" / "router", ["llmop-router"],
                                    OPERATOR_NS)
        cluster.kubectl("apply", "-f", str(POOL))
        for name in MEMBERS:  # one replica: the asker's steady requests would scale it
            cluster.kubectl("-n", MODELS_NS, "patch", "llmmodel", name, "--type=merge", "-p",
                            json.dumps({"spec": {"scaling": {"minReplicas": 1,
                                                             "maxReplicas": 1}}}))
        for name in MEMBERS:
            cluster.wait_phase(MODELS_NS, name, "Ready", 240)
        cluster.kubectl("-n", MODELS_NS, "rollout", "status", f"deployment/{ENGINE}",
                        "--timeout=240s")
        asker = Asker(cluster.service_url(OPERATOR_NS, "llmop-router", 8080))
        asker.thread.start()
        time.sleep(AFTER_SECONDS)  # its steady state before the first change
        found: dict[str, tuple[list[list[tuple[float, float, bool]]], list[float]]] = {
            "in place": ([], []), "a roll (baseline)": ([], [])}
        for turn in range(args.rounds):
            for label in found:
                start = time.monotonic()
                end = in_place(cluster, 16 + turn) if label == "in place" else rolled(cluster)
                time.sleep(AFTER_SECONDS)  # the requests sent just after count too
                found[label][0].append(asker.between(start, end + AFTER_SECONDS))
                found[label][1].append(end - start)
        asker.stop.set()
        asker.thread.join(timeout=300)
        asker.client.close()
    print("\nOne member edited while another (gemma-3-270m-qa) is asked without pause, "
          f"through the router, on the test node (2 cores); {args.rounds} rounds each\n")
    print("| the change | seconds until done (median) | other member: answered | failed | "
          "latency median s | max s |")
    print("|---|---|---|---|---|---|")
    for label, (windows, spans) in found.items():
        print(row(label, windows, spans))


if __name__ == "__main__":
    main()
