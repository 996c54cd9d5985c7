"""The Dockerfile builds the one image the manifests name, non-root and read-only friendly."""

from __future__ import annotations

import json
import re

from samples import REPO

DOCKERFILE = (REPO / "Dockerfile").read_text()


def instructions(name: str) -> list[str]:
    return [line.split(None, 1)[1] for line in DOCKERFILE.splitlines()
            if line.split(None, 1)[:1] == [name]]


def test_two_stages_and_only_wheels_cross_between_them() -> None:
    stages = instructions("FROM")
    assert len(stages) == 2 and stages[0].endswith("AS build")
    assert all(re.search(r":\d+\.\d+\.\d+-slim", s) for s in stages)  # pinned, slim
    assert "from=build,source=/wheels" in DOCKERFILE
    assert not any(i.startswith("--from") for i in instructions("COPY"))


def test_runs_as_uid_65532_with_llmop_as_entrypoint() -> None:
    assert instructions("USER") == ["65532:65532"]
    assert json.loads(instructions("ENTRYPOINT")[0]) == ["llmop"]


def test_the_image_extra_brings_the_hf_cli_the_init_container_runs() -> None:
    assert '"llm-operator[image]"' in DOCKERFILE
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r'image = \[\s*"huggingface-hub', pyproject)


def test_the_build_context_is_only_what_the_image_needs() -> None:
    ignored = (REPO / ".dockerignore").read_text().splitlines()
    assert ignored[1] == "*" and {"!pyproject.toml", "!README.md", "!src/",
                                  "!requirements/lock.txt"} <= set(ignored)
    copied = [c.split()[:-1] for c in instructions("COPY")]
    assert sorted(f for c in copied for f in c) == ["README.md", "pyproject.toml",
                                                    "requirements/lock.txt", "src/"]


def test_the_wheels_are_the_versions_the_tests_passed_with() -> None:
    """requirements/lock.txt constrains the build stage, as it does `make` and the test
    node's image (tools/images.py)."""
    (build,) = [r for r in instructions("RUN") if r.startswith("pip wheel")]
    assert "-c requirements/lock.txt" in build
