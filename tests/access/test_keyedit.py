"""Keys created, disabled, enabled and rotated: the document written, and what is refused."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from llm_operator.access.admin_token import AdminToken, AdminTokenError
from llm_operator.access.keyedit import Allowances, create, listing, rotate, set_disabled
from llm_operator.access.keyring import (
    KEY_PREFIX,
    KeyringError,
    digest,
    new_key,
    parse_keyring,
)
from llm_operator.access.keystore import FileKeyStore, StaleKeys, change

OLD = {"id": "team-a", "sha256": digest("sk-llmop-a"), "models": ["gpt-*"],
       "requestsPerMinute": 60}
DOC: dict[str, Any] = {"keys": [OLD]}


def test_a_created_key_is_returned_once_and_stored_as_its_digest_with_its_allowances() -> None:
    document, key = create(DOC, "team-b", Allowances(
        models=("llama-*",), requests_per_minute=30, budget_usd=12.5, period="week"))
    assert key.startswith(KEY_PREFIX) and key not in yaml.safe_dump(document)
    assert document["keys"][0] == OLD  # the others as they were
    assert document["keys"][1] == {
        "id": "team-b", "sha256": digest(key), "models": ["llama-*"],
        "requestsPerMinute": 30, "budget": {"usd": 12.5, "period": "week"}}
    ring = parse_keyring(document)
    found = ring.find(key)
    assert found is not None and found.id == "team-b"
    assert DOC == {"keys": [OLD]}  # the document read is left alone


def test_a_key_in_an_empty_or_missing_document_is_its_first() -> None:
    for data in (None, {}, {"keys": []}):
        document, key = create(data, "first", Allowances())
        assert listing(document)[0].id == "first"
        assert parse_keyring(document).find(key) is not None


def test_disabling_refuses_the_key_and_enabling_admits_it_again() -> None:
    off = set_disabled(DOC, "team-a", True)
    assert off["keys"][0]["disabled"] is True
    assert parse_keyring(off).find("sk-llmop-a") is None
    on = set_disabled(off, "team-a", False)
    assert on["keys"][0] == OLD
    assert parse_keyring(on).find("sk-llmop-a") is not None


def test_rotating_keeps_the_id_and_allowances_and_the_old_key_stops_working() -> None:
    document, key = rotate(DOC, "team-a")
    ring = parse_keyring(document)
    assert ring.find("sk-llmop-a") is None
    found = ring.find(key)
    assert found is not None and found.id == "team-a" and found.requests_per_minute == 60


@pytest.mark.parametrize(("edit", "says"), [
    (lambda: create(DOC, "team-a", Allowances()), "a key 'team-a' exists already"),
    (lambda: create(DOC, "-bad id", Allowances()), "id '-bad id': use letters"),
    (lambda: create(DOC, "x" * 64, Allowances()), "at most 63"),
    (lambda: set_disabled(DOC, "nobody", True), "no key 'nobody'"),
    (lambda: rotate(DOC, "nobody"), "no key 'nobody'"),
    (lambda: create({"keys": "oops"}, "b", Allowances()), "a mapping with a `keys` list"),
    (lambda: create(["not", "a", "mapping"], "b", Allowances()), "a mapping"),
    # a document the gateway would refuse stays refused: no edit makes it worse or hides it
    (lambda: set_disabled({"keys": [OLD, {**OLD, "id": "dup"}]}, "dup", True),
     "the same key as an earlier entry"),
])
def test_an_edit_the_keys_file_cannot_hold_is_refused_saying_why(edit: Any, says: str
                                                                  ) -> None:
    with pytest.raises(KeyringError) as refused:
        edit()
    assert says in str(refused.value)
    assert "sk-llmop-a" not in str(refused.value)


async def test_the_file_store_replaces_the_file_whole_with_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(yaml.safe_dump(DOC))
    os.chmod(path, 0o640)
    store = FileKeyStore(path)
    ring, key = await change(store, lambda data: create(data, "team-b", Allowances()))
    assert [k.id for k in ring.keys] == ["team-a", "team-b"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    text = path.read_text()
    assert text.startswith("# Client keys") and key not in text
    assert list(tmp_path.iterdir()) == [path]  # no file left beside it


async def test_a_file_changed_since_it_was_read_is_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(yaml.safe_dump(DOC))
    store = FileKeyStore(path)
    data, version = await store.read()
    path.write_text(yaml.safe_dump({"keys": [OLD, {**OLD, "id": "meanwhile",
                                                    "sha256": digest("sk-x")}]}))
    document, _ = create(data, "team-b", Allowances())
    with pytest.raises(StaleKeys):
        await store.write(document, version)
    # change() reads again: the edit made meanwhile is kept
    ring, _ = await change(store, lambda data: create(data, "team-b", Allowances()))
    assert [k.id for k in ring.keys] == ["team-a", "meanwhile", "team-b"]


async def test_a_store_that_keeps_changing_is_given_up_on_saying_so() -> None:
    class Restless:
        where = "a restless store"

        async def read(self) -> tuple[object, str]:
            return DOC, "1"

        async def write(self, document: dict[str, Any], version: str) -> None:
            raise StaleKeys

    with pytest.raises(KeyringError, match="kept changing while it was written"):
        await change(Restless(), lambda data: create(data, "b", Allowances()))


class AnswerLost:
    """A store whose first write lands but whose answer is lost: the client's retry of the
    same write meets the version it changed (409), as a Kubernetes PATCH retried does."""

    where = "a store that loses an answer"

    def __init__(self) -> None:
        self.document: object = DOC
        self.version = 1

    async def read(self) -> tuple[object, str]:
        return self.document, str(self.version)

    async def write(self, document: dict[str, Any], version: str) -> None:
        if version != str(self.version):
            raise StaleKeys
        self.document, self.version = document, self.version + 1
        if self.version == 2:
            raise StaleKeys  # written, but the answer said otherwise


@pytest.mark.parametrize("action", ["create", "rotate"])
async def test_a_key_whose_write_landed_unanswered_is_the_key_shown(action: str) -> None:
    """Made once before the first try: the retry finds it written, and the key shown is
    the one stored, not "exists already" for a key never shown (nor a third key)."""
    store, made = AnswerLost(), new_key()
    if action == "create":
        ring, shown = await change(store, lambda data: create(data, "team-b", Allowances(),
                                                              key=made))
    else:
        ring, shown = await change(store, lambda data: rotate(data, "team-a", key=made))
    assert shown == made and ring.find(made) is not None


@pytest.mark.parametrize(("content", "given", "admitted"), [
    ("0123456789abcdef0123\n", "0123456789abcdef0123", True),
    ("0123456789abcdef0123\n", " 0123456789abcdef0123 ", True),
    ("0123456789abcdef0123", "0123456789abcdef012", False),
    ("0123456789abcdef0123", "", False),
    ("0123456789abcdef0123", None, False),
])
def test_the_admin_token_admits_only_itself(tmp_path: Path, content: str, given: str | None,
                                            admitted: bool) -> None:
    path = tmp_path / "token"
    path.write_text(content)
    assert AdminToken(path).matches(given) is admitted


def test_an_admin_token_is_re_read_when_rotated_and_unusable_ones_refused(
        tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("a" * 32)
    token = AdminToken(path)
    path.write_text("b" * 40)  # a rotated Secret: a new size, a new file
    assert token.matches("b" * 40) and not token.matches("a" * 32)
    path.unlink()
    assert not token.matches("b" * 40)  # gone: nobody is the administrator
    for content, says in (("tok-4c1e", "shorter than 16"), ("", "cannot read")):
        path.write_text(content)
        with pytest.raises(AdminTokenError, match=says) as refused:
            AdminToken(path)
        assert content not in str(refused.value) or not content
