"""The web console in a real browser: Debian's headless Chromium, driven by Selenium, on `llmop up`.

Every page is loaded as a visitor would, checked with axe-core (no serious or critical
accessibility violation) and photographed into .state/console/ (CI keeps them; docs/console.md
shows them). The playground streams a chat from the real llama-server; a model made to fail
shows its reason.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as seen
from selenium.webdriver.support.ui import Select, WebDriverWait

from localstack import gemma, options, row, running, write_model
from npmtools import installed
from samples import REPO

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
SHOTS = REPO / ".state" / "console"
WAIT = 60.0


@pytest.fixture(scope="module")
def axe_source() -> str:
    return (installed("axe-core", "4.11.4") / "axe.min.js").read_text(encoding="utf-8")


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.is_file()]
    assert not missing, f"missing {missing}: `make tools` installs chromium chromium-driver"
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--window-size=1280,1000", "--force-prefers-reduced-motion"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(options=opts,
                              service=webdriver.ChromeService(str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


def accessibility_problems(driver: webdriver.Chrome, axe: str) -> list[str]:
    """axe-core's serious and critical violations on the page as it is now."""
    driver.execute_script(axe)
    found: dict[str, Any] = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document).then(r => done(r), e => done({error: String(e)}));")
    assert "error" not in found, found
    return [f"{v['id']} ({v['impact']}): {v['help']} at "
            f"{[n['target'] for n in v['nodes']][:3]}"
            for v in found["violations"] if v["impact"] in ("serious", "critical")]


def look(driver: webdriver.Chrome, axe: str, name: str) -> None:
    """The page checked with axe-core and photographed, light and dark."""
    assert accessibility_problems(driver, axe) == [], name
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SHOTS / f"{name}.png"))
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {
        "features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    assert accessibility_problems(driver, axe) == [], f"{name}, dark"
    driver.save_screenshot(str(SHOTS / f"{name}-dark.png"))
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})


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

    driver.get(f"{console}playground")
    Select(driver.find_element(By.ID, "model")).select_by_value("gemma-3-270m")
    wait.until(seen.text_to_be_present_in_element_value((By.ID, "model"), "gemma-3-270m"))
    for field, value in (("max-tokens", "16"), ("temperature", "0")):
        box = driver.find_element(By.ID, field)
        box.clear()
        box.send_keys(value)
    prompt = wait.until(seen.element_to_be_clickable((By.ID, "prompt")))
    prompt.send_keys("Q: What is the capital of France?\nA:")
    driver.find_element(By.ID, "send").click()
    wait.until(seen.text_to_be_present_in_element((By.ID, "figures"), "tokens/s"))
    said["answer"] = driver.find_element(By.CSS_SELECTOR, ".message.assistant p").text
    said["figures"] = driver.find_element(By.ID, "figures").text
    look(driver, axe, "playground")

    driver.get(console)
    driver.find_element(By.LINK_TEXT, "gemma3-270m").click()
    wait.until(seen.presence_of_all_elements_located((By.CSS_SELECTOR, ".charts .uplot")))
    wait.until(seen.text_to_be_present_in_element((By.CSS_SELECTOR, "p.latest"), "Now:"))
    said["charts"] = str(len(driver.find_elements(By.CSS_SELECTOR, ".charts .uplot")))
    look(driver, axe, "model")
    return said


async def test_every_page_in_a_browser_the_chat_streams_and_a_failed_model_says_why(
        tmp_path: Path, model_cache: Path, browser: webdriver.Chrome, axe_source: str) -> None:
    models = tmp_path / "models"
    models.mkdir()
    write_model(models, gemma())
    broken = gemma(modelId="gemma-broken", modelSource={"type": "file",
                                                        "path": "missing.gguf"})
    broken["metadata"]["name"] = "gemma-broken"
    broken["spec"]["mcpExposure"]["toolName"] = "gemma_broken"
    write_model(models, broken)
    async with running(options(models, tmp_path / "state", model_cache)) as up:
        said = await asyncio.to_thread(visit, browser, up.console_url, axe_source)
        async with aiohttp.ClientSession() as session, session.get(
                f"{up.console_url}api/series") as resp:
            series = await resp.json()
    reason = row(up.snapshot(), "gemma-broken")["detail"]
    assert "missing.gguf" in reason
    assert "Failed" in said["broken row"] and reason in said["broken row"]
    assert said["broken page"] == f"Failed {reason}"
    # a base model's chat answer: text, 16 tokens of it as the engine counted them
    assert said["answer"].strip() and not said["answer"].startswith("Refused")
    assert said["figures"].startswith("First token ") and ", 16 tokens, " in said["figures"]
    assert said["charts"] == "4"
    # the chat, counted in its route's figures
    assert any(p["requestsPerSecond"] > 0 for p in series["ai-models/gemma3-270m"])
    assert shutil.which("chromium") or CHROMIUM.is_file()
