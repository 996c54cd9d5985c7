"""docs/tutorials/first-model-in-a-cluster.md, run on the real node as a reader runs it.

Each shell block in order, as written (bash, from the repository's root), against the
session's node: `make cluster` and `make cluster-down` are that node's start and stop (the
session fixture's), and the `export` line is the environment every block gets (its
kubeconfig, the virtualenv's kubectl first on PATH). Each block's output is checked for
what the text says it shows.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from e2e_cluster import NodeCluster
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as seen
from selenium.webdriver.support.ui import WebDriverWait

from browser import axe_source, chat, chromium, look
from samples import REPO

pytestmark = pytest.mark.e2e
TUTORIAL = REPO / "docs" / "tutorials" / "first-model-in-a-cluster.md"
BLOCK = re.compile(r"^```sh\n(.*?)^```$", re.MULTILINE | re.DOTALL)
FIXTURE_LINES = ("make cluster", "export KUBECONFIG=")  # the session's node does these
Check = Callable[[str], bool]


def _answer(out: str) -> bool:
    return bool(json.loads(out)["choices"][0]["text"] == " Paris")


# Each block's first words, and what its output holds (None: its exit status says enough).
EXPECTED: list[tuple[str, Check | None]] = [
    ("make cluster", None),
    ("export KUBECONFIG=", None),
    ("kubectl apply -k tests/e2e/install", lambda out: "successfully rolled out" in out),
    ("kubectl get namespace ai-models", lambda out: "condition met" in out),
    ("kubectl -n ai-models get llmmodels",
     lambda out: any(line.split()[:1] == ["gemma-270m"] and "Ready" in line
                     for line in out.splitlines())),
    ("kubectl apply -k tests/e2e/router", lambda out: "successfully rolled out" in out),
    ("ROUTER=$(", _answer),
    ("kubectl delete -f examples/cluster/gemma-270m.yaml", lambda out: "deleted" in out),
]


def _blocks() -> list[str]:
    return BLOCK.findall(TUTORIAL.read_text())


def test_the_tutorial_and_this_test_list_the_same_blocks() -> None:
    assert [text.startswith(first) for text, (first, _) in
            zip(_blocks(), EXPECTED, strict=True)] == [True] * len(EXPECTED)


def test_every_block_of_the_cluster_tutorial_does_what_it_says(
        kube_node: NodeCluster) -> None:
    env = {**os.environ, "KUBECONFIG": str(kube_node.plane.kubeconfig),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for text, (_, check) in zip(_blocks(), EXPECTED, strict=True):
        lines = [line for line in text.splitlines()
                 if not line.startswith(FIXTURE_LINES)]
        if not any(line.strip() for line in lines):
            continue
        script = "\n".join(lines)
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, f"{script}\n{done.stdout}\n{done.stderr}"
        if check is not None:
            assert check(done.stdout), f"{script}\n{done.stdout}"
        if text.startswith("ROUTER=$("):  # the tutorial says the console is there too
            _the_console_through_the_router(env)


def _the_console_through_the_router(env: dict[str, str]) -> None:
    """The router's /ui/ in a real browser: every page, the model Ready, a chat streamed
    through the router, and its figures on the model's page."""
    address = subprocess.run(
        ["kubectl", "-n", "llm-operator-system", "get", "service", "llmop-router", "-o",
         "jsonpath={.spec.clusterIP}"], env=env, capture_output=True, text=True, check=True,
        timeout=30).stdout.strip()
    console, axe = f"http://{address}:8080/ui/", axe_source()
    with chromium() as driver:
        wait = WebDriverWait(driver, 60)
        driver.get(console)
        wait.until(seen.text_to_be_present_in_element(
            (By.CSS_SELECTOR, 'tr[data-model="ai-models/gemma-270m"]'), "Ready"))
        look(driver, axe, "router-models")
        answer, figures = chat(driver, console, "gemma-3-270m", 60)
        assert answer.strip() and ", 16 tokens, " in figures, (answer, figures)
        look(driver, axe, "router-playground")
        for page in ("batches", "guardrails", "keys"):
            driver.get(f"{console}{page}")
            look(driver, axe, f"router-{page}")
        driver.get(console)
        driver.find_element(By.LINK_TEXT, "gemma-270m").click()
        wait.until(seen.presence_of_all_elements_located((By.CSS_SELECTOR, ".charts .uplot")))
        # the tutorial's curl went through this router: its figures are the model's
        wait.until(seen.text_to_be_present_in_element((By.CSS_SELECTOR, "p.latest"), "Now:"))
        look(driver, axe, "router-model")
