"""model-fetch against a real Hugging Face server (olah on loopback): what it downloads, and
why it refuses, before any download, a repo it cannot fetch."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from click.testing import CliRunner

from hubserver import hub, make_repo
from llm_operator.cli.fetch import model_fetch
from llm_operator.fetch.hub import (
    NO_MATCHING_FILE,
    PERMANENT,
    REPO_NOT_FOUND,
    TOKEN_REFUSED,
    FetchError,
    HubSource,
    chosen,
    fetch,
)
from llm_operator.reconcile.status import SOURCE_REJECTED

TOKEN = "hf_e2eSecretTokenValue1234"
FILES = ["config.json", "model-Q4_K_M.gguf", "model-Q8_0.gguf", "original/consolidated.pth",
         "weights.safetensors"]


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("hub")
    big = root / "weights.bin"
    big.write_bytes(bytes(range(256)) * 8192)  # 2 MiB: stored as a Git LFS object
    make_repo(root / "mirrors", "local/tiny", {
        "config.json": b'{"model_type": "gemma3_text"}', "model-Q4_K_M.gguf": b"GGUF-q4",
        "model-Q8_0.gguf": b"GGUF-q8", "original/consolidated.pth": b"pth",
        "weights.safetensors": big})
    with hub(root / "mirrors") as url:
        yield url


@pytest.fixture
def at(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("HF_ENDPOINT", endpoint)  # what the command reads
    return endpoint


# (includes, excludes, the files chosen from FILES)
FILTERS = [
    ((), (), FILES),
    (("*Q4_K_M*.gguf", "*q4_k_m*.gguf"), (), ["model-Q4_K_M.gguf"]),
    ((), ("original/*", "*.pth"), ["config.json", "model-Q4_K_M.gguf", "model-Q8_0.gguf",
                                    "weights.safetensors"]),
    (("*Q2_K*.gguf",), (), []),
]


@pytest.mark.parametrize(("includes", "excludes", "expected"), FILTERS)
def test_the_filters_choose_files_as_the_hub_client_does(
        includes: tuple[str, ...], excludes: tuple[str, ...], expected: list[str]) -> None:
    assert chosen(FILES, HubSource("o/r", includes, excludes)) == expected


def test_it_downloads_the_chosen_files_byte_for_byte(at: str, tmp_path: Path) -> None:
    got = fetch(HubSource("local/tiny", excludes=("original/*", "*.pth")), tmp_path, None, at)
    assert sorted(got) == ["config.json", "model-Q4_K_M.gguf", "model-Q8_0.gguf",
                           "weights.safetensors"]
    assert (tmp_path / "weights.safetensors").read_bytes() == bytes(range(256)) * 8192
    assert not (tmp_path / "original").exists()


# (repo, includes, reason, words in the message)
REFUSED = [
    ("local/nope", (), REPO_NOT_FOUND, "local/nope on http"),
    ("local/tiny", ("*Q2_K*.gguf",), NO_MATCHING_FILE,
     "no file of local/tiny on http"),
]


@pytest.mark.parametrize(("repo", "includes", "reason", "words"), REFUSED)
def test_what_cannot_be_fetched_is_refused_before_any_download(
        at: str, tmp_path: Path, repo: str, includes: tuple[str, ...], reason: str,
        words: str) -> None:
    with pytest.raises(FetchError) as caught:
        fetch(HubSource(repo, includes, token_secret="hf-token"), tmp_path, TOKEN, at)
    assert caught.value.reason == reason
    assert words in str(caught.value) and TOKEN not in str(caught.value)
    assert list(tmp_path.iterdir()) == []
    if reason == NO_MATCHING_FILE:
        assert "*Q2_K*.gguf" in str(caught.value) and "model-Q4_K_M.gguf" in str(caught.value)


@pytest.fixture
async def refusing() -> AsyncIterator[str]:
    """A Hub that checks tokens and refuses this one (olah's offline mirror checks none)."""
    async def refuse(_request: web.Request) -> web.Response:
        return web.json_response({"error": "Invalid credentials in Authorization header"},
                                 status=401)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", refuse)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield f"http://127.0.0.1:{server.port}"
    await server.close()


async def test_a_refused_token_names_its_secret_never_the_token(refusing: str,
                                                                tmp_path: Path) -> None:
    import asyncio  # noqa: PLC0415

    with pytest.raises(FetchError) as caught:
        await asyncio.to_thread(fetch, HubSource("org/private", token_secret="hf-token"),
                                tmp_path, TOKEN, refusing)
    assert caught.value.reason == TOKEN_REFUSED
    assert "Secret hf-token" in str(caught.value) and TOKEN not in str(caught.value)


def test_the_command_writes_the_reason_for_the_operator(at: str, tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    result = CliRunner().invoke(model_fetch, [
        "local/tiny", "--dest", str(tmp_path / "out"), "--include", "*Q2_K*.gguf",
        "--termination-log", str(log)])
    assert result.exit_code == 1
    assert log.read_text().startswith("NoMatchingFile: no file of local/tiny")


def test_the_status_knows_every_permanent_reason() -> None:
    assert SOURCE_REJECTED == PERMANENT
