"""A real browser for the web console's tests: Debian's headless Chromium through Selenium.

``chromium()`` starts one; ``look()`` checks the page in front of it with axe-core (no
serious or critical violation, light and dark) and photographs it into .state/console/
(CI keeps them; docs/console.md shows them).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from selenium import webdriver

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
