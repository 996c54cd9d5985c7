"""NVIDIA MIG: each card's partition profiles and their memory, and how to name a card."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class MigCard:
    """A card that MIG partitions: the words naming it, and its profiles (NVIDIA's names)."""

    name: str
    words: tuple[str, ...]  # regexes: all of them match a model string naming this card
    profiles: tuple[str, ...]


# NVIDIA's MIG user guide, "Supported MIG Profiles". First match wins: the more specific
# card first (an H100 NVL before any H100, each A100 by its memory).
MIG_CARDS: tuple[MigCard, ...] = (
    MigCard("A30 24GB", ("a30",), ("1g.6gb", "1g.6gb+me", "2g.12gb", "2g.12gb+me", "4g.24gb")),
    MigCard("A100 40GB", ("a100", "40[ _-]?gb"),
            ("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")),
    MigCard("A100 80GB", ("a100", "80[ _-]?gb"),
            ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")),
    MigCard("H100 NVL 94GB", ("h100", "nvl"),
            ("1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb")),
    MigCard("H100 80GB", ("h100",),
            ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")),
    MigCard("H200 141GB", ("h200",),
            ("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb")),
    MigCard("B200 180GB", ("b200",),
            ("1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb")),
)
PROFILE = r"^[1-7]g\.[0-9]+gb(\+me)?$"
GB_TO_GIB = 1e9 / 2**30  # a profile's "40gb" is decimal gigabytes


def mig_card(model: str | None) -> MigCard | None:
    """The MIG-capable card a free-form model string names ("NVIDIA H100 80GB HBM3")."""
    if not model:
        return None
    return next((c for c in MIG_CARDS
                  if all(re.search(w, model, re.IGNORECASE) for w in c.words)), None)


def profile_memory_gib(profile: str) -> float:
    """The memory of one instance of the profile, in GiB ("3g.40gb": 37.3)."""
    found = re.match(PROFILE, profile)
    if found is None:
        raise ValueError(f"not a MIG profile: {profile!r}")
    return int(profile.split(".")[1].split("gb", maxsplit=1)[0]) * GB_TO_GIB


def profile_fits_card(profile: str, model: str | None) -> bool:
    card = mig_card(model)
    return card is not None and profile in card.profiles


def card_cel(model: str, profile: str) -> str:
    """CEL twin of profile_fits_card over two CEL expressions (the model string, the profile)."""
    expression = "false"
    for card in reversed(MIG_CARDS):
        match = " && ".join(f"{model}.matches('(?i){w}')" for w in card.words)
        expression = f"({match} ? {profile} in {list(card.profiles)} : {expression})"
    return expression
