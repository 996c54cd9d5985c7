"""A model or adapter from a Hugging Face Hub-compatible server, each failure with a reason.

The Hub's client (huggingface_hub) reads the server from ``HF_ENDPOINT`` (a mirror such as
olah) and the token from ``HF_TOKEN``. Before any byte is downloaded, the repo's file list
says whether the repo exists, the token is accepted and the filter matches: those
failures are permanent (the operator marks the model Failed with the reason), and a retry
of the init container costs one listing, never a download. Messages name the repo, the
filter and the token's Secret, never the token.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

# Reasons of a fetch that cannot succeed until the spec, the Secret or the server changes.
REPO_NOT_FOUND = "RepoNotFound"
TOKEN_REFUSED = "TokenRefused"
NO_MATCHING_FILE = "NoMatchingFile"
PERMANENT = frozenset({REPO_NOT_FOUND, TOKEN_REFUSED, NO_MATCHING_FILE})
DOWNLOAD_FAILED = "DownloadFailed"  # anything else: the network, the disk; retried


class FetchError(Exception):
    """Why a fetch failed: ``reason`` (one of the constants above) and what to do."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class HubSource:
    """What to fetch: a repo, the files wanted (globs; none: all but ``excludes``)."""

    repo: str
    includes: tuple[str, ...] = ()
    excludes: tuple[str, ...] = ()
    token_secret: str | None = None  # the Secret the token came from, for messages


def chosen(files: list[str], source: HubSource) -> list[str]:
    """The repo's files the filters keep (fnmatch, as huggingface_hub filters)."""
    kept = [f for f in files if not source.includes
            or any(fnmatch.fnmatch(f, p) for p in source.includes)]
    return [f for f in kept if not any(fnmatch.fnmatch(f, p) for p in source.excludes)]


def _token_hint(source: HubSource) -> str:
    if source.token_secret:
        return f"the token in Secret {source.token_secret} (key token)"
    return "no token (modelSource.huggingFaceTokenSecret is unset)"


def _scrub(text: str, token: str | None) -> str:
    return text.replace(token, "***") if token else text


def _classify(exc: Exception, source: HubSource, endpoint: str, token: str | None
              ) -> FetchError:
    from huggingface_hub.errors import (  # noqa: PLC0415
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
    )

    code = getattr(getattr(exc, "response", None), "status_code", None)
    where = f"{source.repo} on {endpoint}"
    refused = FetchError(TOKEN_REFUSED, f"{where} refused {_token_hint(source)}: HTTP {code}; "
                         "put a token that may read the repo in the Secret")
    if isinstance(exc, GatedRepoError):  # the repo exists; this token may not read it
        return refused
    if isinstance(exc, RepositoryNotFoundError) or code == 404:  # the Hub says 401 for both
        return FetchError(REPO_NOT_FOUND, f"{where} does not exist, or is private and "
                          f"{_token_hint(source)} cannot read it: check modelId")
    if isinstance(exc, HfHubHTTPError) and code in (401, 403):
        return refused
    detail = _scrub(f"{type(exc).__name__}: {exc}", token).splitlines()[0][:300]
    return FetchError(DOWNLOAD_FAILED, f"downloading {where} failed: {detail}")


def fetch(source: HubSource, dest: Path, token: str | None, endpoint: str | None = None
          ) -> list[str]:
    """Download the chosen files of ``source`` into ``dest``; the files' names.

    ``endpoint``: the server (default: $HF_ENDPOINT as the client read it, or
    huggingface.co). Files already complete in ``dest`` are not downloaded again
    (huggingface_hub's local directory metadata), so a restarted pod resumes.
    """
    from huggingface_hub import HfApi, constants, snapshot_download  # noqa: PLC0415

    endpoint = endpoint or constants.ENDPOINT
    try:
        files = HfApi(endpoint=endpoint).list_repo_files(source.repo, token=token or False)
    except Exception as exc:
        raise _classify(exc, source, endpoint, token) from None
    wanted = chosen(files, source)
    if not wanted:
        filters = ", ".join(source.includes) or f"all but {', '.join(source.excludes)}"
        listing = ", ".join(sorted(files)[:12]) + (", ..." if len(files) > 12 else "")
        raise FetchError(NO_MATCHING_FILE, f"no file of {source.repo} on {endpoint} matches "
                         f"{filters} (it has {listing or 'no files'}): check quantization "
                         "and inferenceEngine, or the repo")
    try:
        snapshot_download(source.repo, local_dir=dest, allow_patterns=wanted,
                          token=token or False, endpoint=endpoint)
    except Exception as exc:
        raise _classify(exc, source, endpoint, token) from None
    return wanted
