"""A real browser for the web console's tests: Debian's headless Chromium through Selenium.

``chromium()`` starts one; ``look()`` checks the page in front of it with axe-core (no
serious or critical violation, light and dark) and photographs it into .state/console/
(CI keeps them; docs/console.md shows them).
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as seen
from selenium.webdriver.support.ui import Select, WebDriverWait

from npmtools import installed
from samples import REPO

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
SHOTS = REPO / ".state" / "console"
AXE = ("axe-core", "4.11.4")


def axe_source() -> str:
    return (installed(*AXE) / "axe.min.js").read_text(encoding="utf-8")


@contextlib.contextmanager
def chromium() -> Iterator[webdriver.Chrome]:
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


def chat(driver: webdriver.Chrome, console: str, model_id: str, wait_seconds: float
         ) -> tuple[str, str]:
    """One message in the playground, 16 tokens at temperature 0: the answer as it
    streamed in, and the figures under it."""
    wait = WebDriverWait(driver, wait_seconds)
    driver.get(f"{console}playground")
    Select(driver.find_element(By.ID, "model")).select_by_value(model_id)
    wait.until(seen.text_to_be_present_in_element_value((By.ID, "model"), model_id))
    for field, value in (("max-tokens", "16"), ("temperature", "0")):
        box = driver.find_element(By.ID, field)
        box.clear()
        box.send_keys(value)
    prompt = wait.until(seen.element_to_be_clickable((By.ID, "prompt")))
    prompt.send_keys("Q: What is the capital of France?\nA:")
    driver.find_element(By.ID, "send").click()
    wait.until(seen.text_to_be_present_in_element((By.ID, "figures"), "tokens/s"))
    return (driver.find_element(By.CSS_SELECTOR, ".message.assistant p").text,
            driver.find_element(By.ID, "figures").text)


def curl_models(url: str, key: str) -> str:
    """curl's status for GET /v1/models with ``key``, as a user's script would ask."""
    return subprocess.run(
        ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"{url}/v1/models",
         "-H", f"Authorization: Bearer {key}"],
        check=True, capture_output=True, text=True, timeout=30).stdout


def administer_keys(url: str, token: str, shots: str = "") -> str:
    """In Chromium: sign in with the admin token, create a key, use it with curl, disable
    it and see curl refused; each keys page checked with axe-core and photographed (names
    prefixed with ``shots``). The key made, which the caller may use again."""
    axe = axe_source()
    with chromium() as driver:
        wait = WebDriverWait(driver, 30)
        driver.get(f"{url}/ui/keys")
        driver.find_element(By.ID, "key").send_keys(token)
        driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
        wait.until(seen.url_to_be(f"{url}/ui/models"))  # signed in: its cookie is set
        driver.get(f"{url}/ui/keys")
        wait.until(seen.presence_of_element_located((By.CSS_SELECTOR, 'tr[data-key="team-a"]')))
        driver.find_element(By.ID, "id").send_keys("ci")
        driver.find_element(By.ID, "rpm").send_keys("600")
        driver.find_element(By.CSS_SELECTOR, "form.newkey button[type=submit]").click()
        key = wait.until(seen.presence_of_element_located((By.ID, "secret"))).text
        look(driver, axe, f"{shots}key-created")
        assert curl_models(url, key) == "200"
        driver.get(f"{url}/ui/keys")
        driver.find_element(By.CSS_SELECTOR, 'button[aria-label="Disable ci"]').click()
        wait.until(seen.text_to_be_present_in_element(
            (By.CSS_SELECTOR, 'tr[data-key="ci"]'), "disabled"))
        assert key not in driver.page_source
        look(driver, axe, f"{shots}keys-admin")
        assert curl_models(url, key) == "401"
    return key
