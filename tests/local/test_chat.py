"""`llmop chat`: the requests it sends, and a real session under tmux against `llmop up`."""

from __future__ import annotations

import asyncio
import shlex
import shutil
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from llm_operator.cli.chat import ChatError, Conversation, deltas

from localstack import example_dir, options, running

TURNS = [("What is the capital of France?", "Paris.")]
PROMPT = ">>>"


@pytest.mark.parametrize(("conversation", "path", "body"), [
    (Conversation("m"), "chat/completions",
     {"model": "m", "stream": True, "max_tokens": 512,
      "messages": [{"role": "user", "content": "And of Italy?"}]}),
    (Conversation("m", turns=list(TURNS), temperature=0.0), "chat/completions",
     {"model": "m", "stream": True, "max_tokens": 512, "temperature": 0.0, "messages": [
         {"role": "user", "content": "What is the capital of France?"},
         {"role": "assistant", "content": "Paris."},
         {"role": "user", "content": "And of Italy?"}]}),
    (Conversation("m", transcript=True, turns=list(TURNS), max_tokens=32), "completions",
     {"model": "m", "stream": True, "max_tokens": 32, "stop": ["\n"],
      "prompt": "Q: What is the capital of France?\nA: Paris.\nQ: And of Italy?\nA:"}),
])
def test_each_turn_carries_the_conversation(conversation: Conversation, path: str,
                                            body: dict[str, Any]) -> None:
    assert conversation.request("And of Italy?") == (path, body)


def test_stream_events_become_text_and_errors_say_why() -> None:
    events = [b'data: {"choices": [{"delta": {"role": "assistant"}}]}\n', b"\n",
              b'data: {"choices": [{"delta": {"content": "Pa"}}]}\n',
              b'data: {"choices": [{"text": "ris"}]}\n', b"data: [DONE]\n",
              b'data: {"choices": [{"text": "never read"}]}\n']
    assert list(deltas(iter(events))) == ["Pa", "ris"]
    with pytest.raises(ChatError, match="upstream hung up"):
        list(deltas(iter([b'data: {"error": {"message": "upstream hung up"}}\n'])))


class Tmux:
    """A tmux server of our own (its own socket), driven as a user at a terminal would."""

    def __init__(self) -> None:
        assert shutil.which("tmux"), "tmux is missing: `make tools` installs it"
        self.socket = f"llmop-test-{uuid.uuid4().hex[:8]}"

    async def run(self, *args: str) -> str:
        proc = await asyncio.create_subprocess_exec(
            "tmux", "-L", self.socket, *args, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"tmux {' '.join(args)}: {err.decode().strip()}")
        return out.decode()

    async def screen(self) -> str:
        return await self.run("capture-pane", "-p", "-t", "chat")

    async def until_shown(self, text: str, timeout: float = 60) -> str:
        """Poll the pane (a terminal has no event to wait on) until ``text`` appears; PROMPT
        means the last line is an empty prompt (tmux trims its trailing space)."""
        screen = ""

        def shown() -> bool:
            if text == PROMPT:
                lines = [line for line in screen.splitlines() if line.strip()]
                return bool(lines) and lines[-1] == PROMPT
            return text in screen

        try:
            async with asyncio.timeout(timeout):
                while True:
                    screen = await self.screen()
                    if shown():
                        break
                    await asyncio.sleep(0.1)
        except TimeoutError:
            raise AssertionError(f"{text!r} not shown in {timeout}s; screen:\n{screen}") \
                from None
        return screen


async def test_a_terminal_session_streams_answers_and_says_bye(
        tmp_path: Path, model_cache: Path) -> None:
    models = example_dir(tmp_path / "models")
    state = tmp_path / "state"
    tmux = Tmux()
    async with running(options(models, state, model_cache)):
        command = shlex.join([sys.executable, "-m", "llm_operator", "chat", "--state-dir",
                              str(state), "--temperature", "0"])
        await tmux.run("new-session", "-d", "-s", "chat", "-x", "120", "-y", "30",
                       f"{command}; echo chat-exited-$?; sleep 30")
        try:
            first = await tmux.until_shown(PROMPT)
            assert "Chatting with gemma-3-270m at http://127.0.0.1:" in first
            assert "(a base model: it continues a Q/A transcript)" in first
            await tmux.run("send-keys", "-t", "chat", "What is the capital of France?",
                           "Enter")
            await tmux.until_shown("Paris")
            answered = await tmux.until_shown(PROMPT, timeout=30)
            await tmux.run("send-keys", "-t", "chat", "/bye", "Enter")
            ended = await tmux.until_shown("chat-exited-0")
        finally:
            await tmux.run("kill-server")
    lines = [line for line in answered.splitlines() if line.strip()]
    asked = lines.index(">>> What is the capital of France?")
    assert "Paris" in lines[asked + 1]
    assert "Traceback" not in ended
