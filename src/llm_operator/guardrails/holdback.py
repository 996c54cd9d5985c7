"""Where a guarded stream's checked text may be cut: what goes out now, what waits (pure).

The text not yet sent is checked as one window. All of it but the last ``hold`` characters
may go out, unless the cut falls inside a mask (``<ENTITY_TYPE>``): then it moves before
it. An entity shorter than ``hold`` that begins before the cut has ended by the time it is
checked, so it is found whole; a longer one (more than ``hold`` characters) could go out
in part before it is recognisable, which is what ``streamHoldBackChars`` bounds.
"""

from __future__ import annotations

import re

MASK = re.compile(r"<[A-Z][A-Z0-9_]*>")


def cut(window: str, hold: int, *, final: bool) -> int:
    """How many characters of ``window`` (checked, masked) may be sent now."""
    if final:
        return len(window)
    point = max(0, len(window) - hold)
    for mask in MASK.finditer(window):
        if mask.start() < point < mask.end():
            return mask.start()
    return point
