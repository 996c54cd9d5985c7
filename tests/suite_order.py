"""The real-node suite's run order: the modules that wait for the background build go as soon
as it is ready, at a module boundary, so that their one-core engine starts run beside the
other suites rather than after them.

Pure: it sees modules as lists of items and asks ``ready()``; the e2e conftest's test loop
feeds pytest's items through it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from itertools import pairwise
from typing import TypeVar

Item = TypeVar("Item")


def run_order(modules: Sequence[Sequence[Item]], waits: Callable[[Sequence[Item]], bool],
              ready: Callable[[], bool]) -> Iterator[tuple[Item, Item | None]]:
    """Each item with the item that runs after it (pytest's ``nextitem``: None at the end).

    ``modules`` in collection order; ``waits(module)`` says the module waits for the
    background build. The next module is chosen when its predecessor's last item starts
    (pytest tears a module's fixtures down by ``nextitem``, so it must be known then): a
    waiting one if ``ready()``, else the next of the others; once those are done the
    waiting ones run whether or not it is ready (their fixtures wait for it). Each keeps
    its collection order within its kind.
    """
    others = deque(m for m in modules if m and not waits(m))
    waiting = deque(m for m in modules if m and waits(m))

    def choose() -> Sequence[Item] | None:
        if waiting and (not others or ready()):
            return waiting.popleft()
        return others.popleft() if others else None

    module = choose()
    while module is not None:
        yield from pairwise(module)  # each item but the last, with the one after it
        last, module = module[-1], choose()
        yield last, (module[0] if module is not None else None)
