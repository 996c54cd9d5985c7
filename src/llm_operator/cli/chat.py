"""`llmop chat`: an interactive terminal chat with a model behind the gateway, streamed."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from llm_operator.cli.local import state_option
from llm_operator.local.state import StateDir
from llm_operator.registry.tools import transcript_request

HELP = ("Type a message and press Enter. /clear forgets the conversation, /bye (or Ctrl-D) "
        "leaves; Ctrl-C stops an answer.")
TIMEOUT_SECONDS = 300.0


class ChatError(Exception):
    """The gateway refused a turn; the message says why (its OpenAI error text)."""


@dataclass
class Conversation:
    """The turns so far, and how to ask the next one.

    A chat model gets the messages (/v1/chat/completions). A base model gets a Q/A
    transcript to continue (/v1/completions), stopped at the end of its answer line.
    """

    model: str
    transcript: bool = False
    max_tokens: int = 512
    temperature: float | None = None
    turns: list[tuple[str, str]] = field(default_factory=list)

    def request(self, question: str) -> tuple[str, dict[str, Any]]:
        """(path, body) of the streamed request that answers ``question`` next."""
        body: dict[str, Any] = {"model": self.model, "stream": True,
                                "max_tokens": self.max_tokens}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        messages: list[dict[str, str]] = []
        for q, a in self.turns:
            messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        messages.append({"role": "user", "content": question})
        if self.transcript:
            return "completions", body | transcript_request(messages)
        return "chat/completions", body | {"messages": messages}


def deltas(lines: Iterator[bytes]) -> Iterator[str]:
    """The text pieces of an OpenAI server-sent event stream (chat or completions)."""
    for raw in lines:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        event = json.loads(data)
        if "error" in event:
            raise ChatError(str((event["error"] or {}).get("message") or event["error"]))
        for choice in event.get("choices") or []:
            piece = (choice.get("delta") or {}).get("content") or choice.get("text") or ""
            if piece:
                yield piece


def _stream(base: str, path: str, body: dict[str, Any]) -> Iterator[str]:
    request = urllib.request.Request(
        f"{base.rstrip('/')}/{path}", data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
    try:
        response = urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS)
    except urllib.error.HTTPError as exc:
        raise ChatError(_error_text(exc)) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ChatError(f"cannot reach the gateway at {base}: {reason}") from None
    with response:
        yield from deltas(response)


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        error = json.loads(exc.read()).get("error") or {}
        return f"{exc.code}: {error.get('message') or error}"
    except (ValueError, AttributeError):
        return f"{exc.code}: {exc.reason}"


def _models(base: str) -> list[str]:
    try:
        with urllib.request.urlopen(f"{base.rstrip('/')}/models",
                                    timeout=10) as response:
            return [str(m["id"]) for m in json.load(response).get("data", [])]
    except (urllib.error.URLError, OSError, ValueError, KeyError) as exc:
        raise click.ClickException(f"cannot list the models at {base}: {exc}") from None


def _target(url: str | None, state_dir: Path, model: str | None
            ) -> tuple[str, str, bool]:
    """(gateway URL, model id, whether it is a base model) from the flags or `llmop up`."""
    snap = StateDir(state_dir.resolve()).read()
    if url is None:
        if snap is None:
            raise click.ClickException(
                "llmop up is not running (start it with `make up`, or pass --url with an "
                "OpenAI-compatible base URL such as http://127.0.0.1:8000/v1)")
        url = str(snap["gateway"])
    rows = [r for r in (snap or {}).get("models", []) if r["phase"] in ("Ready", "Proxying")]
    served = [str(r["modelId"]) for r in rows] or _models(url)
    if model is None:
        if not served:
            raise click.ClickException(f"no model is serving at {url} yet")
        model = served[0]
    elif model not in served:
        known = ", ".join(served) or "none"
        raise click.ClickException(f"model {model!r} is not served at {url}; serving: {known}")
    base = any(r["modelId"] == model and r.get("baseModel") for r in rows)
    return url, model, base


@click.command()
@click.argument("model", required=False)
@click.option("--url", metavar="URL", help="An OpenAI-compatible base URL; default: the "
              "gateway of the running `llmop up`.")
@state_option
@click.option("--transcript/--messages", "transcript", default=None,
              help="How to ask: a Q/A transcript on /v1/completions (for base models) or "
              "messages on /v1/chat/completions. Default: a transcript for models annotated "
              "ai.example.io/base-model: \"true\", messages otherwise.")
@click.option("--max-tokens", type=click.IntRange(1), default=512, show_default=True,
              help="The longest answer, in tokens.")
@click.option("--temperature", type=click.FloatRange(0, 2), default=None,
              help="Sampling temperature (default: the model's).")
def chat(model: str | None, *, url: str | None, state_dir: Path, transcript: bool | None,
         max_tokens: int, temperature: float | None) -> None:
    """Chat with a model in the terminal, answers streamed as they are generated.

    MODEL is a model id (the MODEL ID column of `llmop status`); the default is the first
    model serving. Each answer sees the whole conversation so far.

    \b
    Examples:
      llmop chat                           the first model of the running `llmop up`
      llmop chat gpt-5.5                   a model by its id
      llmop chat --url URL/v1 my-model     any OpenAI-compatible server
    """
    url, model, base = _target(url, state_dir, model)
    talk = Conversation(model, transcript=base if transcript is None else transcript,
                        max_tokens=max_tokens, temperature=temperature)
    how = " (a base model: it continues a Q/A transcript)" if talk.transcript else ""
    click.echo(f"Chatting with {model} at {url}{how}.\n{HELP}")
    while True:
        try:
            question = input(">>> ").strip()
        except EOFError:
            click.echo()
            return
        except KeyboardInterrupt:
            click.echo("\nUse /bye or Ctrl-D to leave.")
            continue
        if question in ("/bye", "/exit", "/quit"):
            return
        if question == "/clear":
            talk.turns.clear()
            click.echo("(the conversation is forgotten)")
            continue
        if question in ("/?", "/help"):
            click.echo(HELP)
            continue
        if not question:
            continue
        _answer(talk, url, question)


def _answer(talk: Conversation, url: str, question: str) -> None:
    """Stream one answer to the terminal and remember it (even when cut by Ctrl-C)."""
    path, body = talk.request(question)
    pieces: list[str] = []
    try:
        for piece in _stream(url, path, body):
            text = piece if pieces else piece.lstrip()
            pieces.append(text)
            sys.stdout.write(text)
            sys.stdout.flush()
    except ChatError as exc:
        click.echo(click.style(f"error: {exc}", fg="red"), err=True)
        return
    except KeyboardInterrupt:
        click.echo(" [stopped]", nl=False)
    click.echo()
    talk.turns.append((question, "".join(pieces).strip()))
