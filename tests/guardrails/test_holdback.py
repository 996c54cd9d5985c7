"""Where a guarded stream's text is cut: never inside a mask, the last characters held."""

from __future__ import annotations

import pytest

from llm_operator.guardrails.holdback import cut


@pytest.mark.parametrize(("window", "hold", "final", "sent"), [
    ("Hello there, friend", 5, False, "Hello there, f"),
    ("Hi", 5, False, ""),  # shorter than the hold: all of it waits
    ("Hi", 5, True, "Hi"),  # the stream ended: all of it goes
    ("mail <EMAIL_ADDRESS> now", 8, False, "mail "),  # the cut moves before the mask
    ("mail <EMAIL_ADDRESS> now and then", 8, False, "mail <EMAIL_ADDRESS> now "),
    ("<CREDIT_CARD>", 4, False, ""),
    ("a < b and c > d", 3, False, "a < b and c "),  # not a mask: cut where it falls
])
def test_the_cut_keeps_the_hold_and_never_splits_a_mask(window: str, hold: int, final: bool,
                                                        sent: str) -> None:
    assert window[:cut(window, hold, final=final)] == sent
