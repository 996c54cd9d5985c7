"""A newcomer's first answer: from opening the console to a streamed reply, on `make up`'s stack.

Run from the repository root with the project's virtualenv, after `make up` has built
llama-server once (needs Debian's chromium and chromium-driver):

    .venv/bin/python bench/console/newcomer.py [--rounds 5]

It starts `llmop up examples/local` (the stack `make up` serves: the real llama-server
with gemma-3-270m) on free ports, waits until the model is Ready, then per round, in a
fresh headless Chromium, does what the README tells a newcomer: open the console's
address, see the model Ready, go to the Playground, type a message and send it, and wait
for the answer to finish streaming (the figures under it). It times each step; a person
reads and types slower than a script, so the figure is the console's and the model's
part of the 30 s a newcomer should need, not a person's.

Prints a Markdown table; docs/benchmarks.md quotes it.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as seen
from selenium.webdriver.support.ui import Select, WebDriverWait

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests"))
from browser import chromium  # noqa: E402

sys.path.insert(0, str(HERE.parent))
from up_stack import llmop_up  # noqa: E402

STEPS = ("models page, model Ready", "playground open", "first token", "answer streamed")


@contextlib.contextmanager
def stack() -> Iterator[str]:
    """`llmop up examples/local`; its console's address once it serves."""
    with tempfile.TemporaryDirectory() as state, \
            llmop_up(REPO / "examples" / "local", Path(state)) as port:
        yield f"http://127.0.0.1:{port}/ui/"


def one_visit(console: str) -> list[float]:
    """Seconds from opening the console to the end of each step, in a fresh browser."""
    with chromium() as driver:
        wait = WebDriverWait(driver, 120)
        began = time.perf_counter()
        marks = []
        driver.get(console)
        wait.until(seen.text_to_be_present_in_element(
            (By.CSS_SELECTOR, 'tr[data-model="ai-models/gemma3-270m"]'), "Ready"))
        marks.append(time.perf_counter() - began)
        driver.find_element(By.LINK_TEXT, "Playground").click()
        Select(wait.until(seen.presence_of_element_located((By.ID, "model")))) \
            .select_by_value("gemma-3-270m")
        prompt = wait.until(seen.element_to_be_clickable((By.ID, "prompt")))
        marks.append(time.perf_counter() - began)
        prompt.send_keys("Hello! Who are you?")
        driver.find_element(By.ID, "send").click()
        wait.until(lambda d: d.find_element(By.CSS_SELECTOR, ".message.assistant p").text)
        marks.append(time.perf_counter() - began)
        wait.until(seen.text_to_be_present_in_element((By.ID, "figures"), "tokens/s"))
        marks.append(time.perf_counter() - began)
        return marks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with stack() as console:
        rounds = [one_visit(console) for _ in range(args.rounds)]
    print(f"\nFrom opening {console.split('/ui/')[0]}/ui/ to each step, fresh headless "
          f"Chromium per round, median of {args.rounds} (seconds):\n")
    print("| step | median | rounds |")
    print("|---|---|---|")
    for index, step in enumerate(STEPS):
        values = [r[index] for r in rounds]
        print(f"| {step} | {statistics.median(values):.2f} | "
              f"{', '.join(f'{v:.2f}' for v in values)} |")


if __name__ == "__main__":
    main()
