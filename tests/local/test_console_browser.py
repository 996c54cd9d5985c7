"""The web console in a real browser (Debian's headless Chromium through Selenium) on `llmop up`.

Every page is loaded as a visitor would, checked with axe-core (no serious or critical
accessibility violation) and photographed into .state/console/ (CI keeps them;
docs/console.md shows them). The playground streams a chat from the real llama-server; a
model made to fail shows its reason; a batch's bar moves while its page is open.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import openai
import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as seen
from selenium.webdriver.support.ui import WebDriverWait

from llm_operator.api.validation import parse_llmmodel
from llm_operator.profiles.llamaserver import parallel_slots

from browser import axe_source, chat, chromium, look
from localstack import gemma, options, row, running, write_model

WAIT = 60.0


@pytest.fixture(scope="module")
def axe() -> str:
    return axe_source()


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    with chromium() as driver:
        yield driver


def visit(driver: webdriver.Chrome, console: str, axe: str) -> dict[str, str]:
    """Every page, as a visitor goes through them; what each said that the test checks."""
    wait = WebDriverWait(driver, WAIT)
    said: dict[str, str] = {}
    driver.get(console)
    wait.until(seen.text_to_be_present_in_element(
        (By.CSS_SELECTOR, 'tr[data-model="ai-models/gemma3-270m"]'), "Ready"))
    broken = driver.find_element(By.CSS_SELECTOR, 'tr[data-model="ai-models/gemma-broken"]')
    said["broken row"] = broken.text
    look(driver, axe, "models")

    driver.get(f"{console}models/ai-models/gemma-broken")
    said["broken page"] = driver.find_element(By.CSS_SELECTOR, "p.state").text
    look(driver, axe, "model-failed")

    said["answer"], said["figures"] = chat(driver, console, "gemma-3-270m", WAIT)
    look(driver, axe, "playground")

    said["bar"] = batch_bar(driver, console, axe)

    for page in ("guardrails", "keys"):  # what there is to see with no guard and no key
        driver.get(f"{console}{page}")
        said[page] = driver.find_element(By.TAG_NAME, "main").text
        look(driver, axe, page)

    driver.get(console)
    driver.find_element(By.LINK_TEXT, "gemma3-270m").click()
    wait.until(seen.presence_of_all_elements_located((By.CSS_SELECTOR, ".charts .uplot")))
    wait.until(seen.text_to_be_present_in_element((By.CSS_SELECTOR, "p.latest"), "Now:"))
    said["charts"] = str(len(driver.find_elements(By.CSS_SELECTOR, ".charts .uplot")))
    look(driver, axe, "model")
    return said


BATCH = 12  # requests: a few seconds of work on 2 cores, so that the bar is seen moving


def batch_bar(driver: webdriver.Chrome, console: str, axe: str) -> str:
    """A batch sent while its page is open: the values its bar took, in order."""
    wait = WebDriverWait(driver, WAIT)
    driver.get(f"{console}batches")
    wait.until(seen.text_to_be_present_in_element((By.ID, "batch-rows"), "No batch yet"))
    sdk = openai.OpenAI(base_url=console.replace("/ui/", "/v1"), api_key="unused")
    lines = b"".join(json.dumps({
        "custom_id": str(i), "method": "POST", "url": "/v1/chat/completions",
        "body": {"model": "gemma-3-270m", "max_tokens": 64, "temperature": 0,
                 "messages": [{"role": "user", "content": f"Count to {i + 3}."}]}}).encode()
        + b"\n" for i in range(BATCH))
    uploaded = sdk.files.create(file=("in.jsonl", lines), purpose="batch")
    batch = sdk.batches.create(input_file_id=uploaded.id, completion_window="24h",
                               endpoint="/v1/chat/completions")
    values: list[int] = []

    def bar_at_the_end(found: webdriver.Chrome) -> bool:
        bars = found.find_elements(By.CSS_SELECTOR, f'tr[data-batch="{batch.id}"] progress')
        if bars:
            try:
                value = int(bars[0].get_attribute("value") or 0)
            except StaleElementReferenceException:  # the page redrew the row meanwhile
                return False
            if not values or values[-1] != value:
                values.append(value)
        return bool(values) and values[-1] == BATCH

    wait.until(bar_at_the_end)
    wait.until(seen.text_to_be_present_in_element(
        (By.CSS_SELECTOR, f'tr[data-batch="{batch.id}"]'), "completed"))
    look(driver, axe, "batches")
    return ",".join(map(str, values))


async def test_every_page_in_a_browser_the_chat_streams_and_a_failed_model_says_why(
        tmp_path: Path, model_cache: Path, browser: webdriver.Chrome, axe: str) -> None:
    models = tmp_path / "models"
    models.mkdir()
    write_model(models, gemma())
    broken = gemma(modelId="gemma-broken", modelSource={"type": "file",
                                                        "path": "missing.gguf"})
    broken["metadata"]["name"] = "gemma-broken"
    broken["spec"]["mcpExposure"]["toolName"] = "gemma_broken"
    write_model(models, broken)
    async with running(options(models, tmp_path / "state", model_cache)) as up:
        said = await asyncio.to_thread(visit, browser, up.console_url, axe)
        async with aiohttp.ClientSession() as session:
            # the same prompt twice: llama-server serves the second from its prefix cache
            for _ in range(2):
                async with session.post(f"{up.gateway_url}/chat/completions", json={
                        "model": "gemma-3-270m", "max_tokens": 4, "messages": [
                            {"role": "user", "content": "Name a colour."}]}) as resp:
                    assert resp.status == 200
            up.console.read()  # a point that holds both
            async with session.get(f"{up.console_url}api/series") as resp:
                series = await resp.json()
    reason = row(up.snapshot(), "gemma-broken")["detail"]
    assert "missing.gguf" in reason
    assert "Failed" in said["broken row"] and reason in said["broken row"]
    assert said["broken page"] == f"Failed {reason}"
    # a base model's chat answer: text, 16 tokens of it as the engine counted them
    assert said["answer"].strip() and not said["answer"].startswith("Refused")
    assert said["figures"].startswith("First token ") and ", 16 tokens, " in said["figures"]
    assert said["charts"] == "7"
    assert "No guard has found anything yet" in said["guardrails"]
    assert "This gateway asks for no client key" in said["keys"]
    bar = [int(v) for v in said["bar"].split(",")]
    assert bar == sorted(bar) and bar[-1] == BATCH and bar[0] < BATCH, bar  # it moved
    # the chat and the batch, counted in its route's figures
    points = series["ai-models/gemma3-270m"]
    assert any(p["requestsPerSecond"] > 0 for p in points)
    assert (points[-1]["cacheHitPercent"] or 0) > 0, points[-1]
    assert {p["slots"] for p in points} == {parallel_slots(parse_llmmodel(gemma()).spec)}
    assert any((p["busy"] or 0) > 0 for p in points), points
