"""What an engine was asked: the prompt it rendered from a conversation, and its tokens.

llama-server renders a chat request's messages with its chat template (``/apply-template``
shows the text) and counts that text's tokens, BOS included (``/tokenize`` with
``add_special``): a chat request that reached the model reports exactly that many
``prompt_tokens``. The tests compare the two on every path a chat request can take.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import httpx
import openai

# Gemma's turns, as llama.cpp's builtin gemma template writes them
GEMMA_USER_TURN = "<start_of_turn>user\n{text}<end_of_turn>\n<start_of_turn>model\n"
QUESTIONS = ("What is the capital of France?", "Write a haiku about the sea, please.")
# A conversation the base model continues with the answer: two questions answered, a third
# asked. Gemma 3 270M (base) answers "Paris." once it sees the turns; "gemma" it cannot.
KNOWN_ANSWER = ([{"role": "user", "content": "What is the capital of Germany?"},
                 {"role": "assistant", "content": "Berlin."},
                 {"role": "user", "content": "What is the capital of Italy?"},
                 {"role": "assistant", "content": "Rome."},
                 {"role": "user", "content": "What is the capital of France?"}], "Paris")


def ask(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _model(model: str | None) -> dict[str, Any]:
    return {"model": model} if model else {}


async def engine_prompt(http: aiohttp.ClientSession, engine: str,
                        messages: list[dict[str, str]], model: str | None = None
                        ) -> tuple[str, int]:
    """The prompt llama-server at ``engine`` renders of ``messages``, and its token count."""
    async with http.post(f"{engine}/apply-template",
                         json={"messages": messages, **_model(model)}) as resp:
        assert resp.status == 200, await resp.text()
        prompt: str = (await resp.json())["prompt"]
    async with http.post(f"{engine}/tokenize", json={
            "content": prompt, "add_special": True, **_model(model)}) as resp:
        assert resp.status == 200, await resp.text()
        return prompt, len((await resp.json())["tokens"])


def engine_prompt_now(engine: str, messages: list[dict[str, str]], model: str | None = None
                      ) -> tuple[str, int]:
    """``engine_prompt`` for a test without an event loop.

    A connection each request: a pool's llama-server router closes an idle keep-alive
    connection as a request reuses it (seen on the node, while it loaded a member).
    """
    with httpx.Client(timeout=60, limits=httpx.Limits(max_keepalive_connections=0)) as http:
        resp = http.post(f"{engine}/apply-template",
                         json={"messages": messages, **_model(model)})
        assert resp.status_code == 200, resp.text
        prompt: str = resp.json()["prompt"]
        resp = http.post(f"{engine}/tokenize",
                         json={"content": prompt, "add_special": True, **_model(model)})
        assert resp.status_code == 200, resp.text
        return prompt, len(resp.json()["tokens"])


def assert_chat_reaches_the_model(engine: str, base_url: str, model: str) -> None:
    """Two questions through the OpenAI SDK at ``base_url`` (a Service, the router, a pool)
    each cost the tokens of their own prompt as llama-server at ``engine`` renders it in
    Gemma's turns; and the known-answer conversation is answered."""
    client = openai.OpenAI(base_url=base_url, api_key="unused", timeout=60, max_retries=0)
    rendered = [engine_prompt_now(engine, ask(q), model) for q in QUESTIONS]
    for (prompt, _), question in zip(rendered, QUESTIONS, strict=True):
        assert prompt.endswith(GEMMA_USER_TURN.format(text=question)), prompt
    counted = []
    for question in QUESTIONS:
        usage = client.chat.completions.create(
            model=model, messages=ask(question), max_tokens=1).usage  # type: ignore[arg-type]
        assert usage is not None
        counted.append(usage.prompt_tokens)
    assert counted == [tokens for _, tokens in rendered] and counted[0] != counted[1]
    known = client.chat.completions.create(
        model=model, messages=KNOWN_ANSWER[0], max_tokens=4,  # type: ignore[arg-type]
        temperature=0)
    assert (known.choices[0].message.content or "").startswith(KNOWN_ANSWER[1]), known


def assert_vllm_chat_reaches_the_model(base: str, model: str) -> None:
    """Two questions to vLLM at ``base`` (a Service root): each chat request costs the
    tokens of the conversation as vLLM renders it with the template the weights carry
    (its ``/tokenize`` of the messages), and two questions are two prompts."""
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", timeout=60,
                           max_retries=0)
    counted, rendered = [], []
    with httpx.Client(timeout=30) as http:
        for question in QUESTIONS:
            tokenized = http.post(f"{base}/tokenize", json={
                "model": model, "messages": ask(question), "add_generation_prompt": True})
            assert tokenized.status_code == 200, tokenized.text
            rendered.append(tokenized.json()["count"])
            usage = client.chat.completions.create(
                model=model, messages=ask(question), max_tokens=1).usage  # type: ignore[arg-type]
            assert usage is not None
            counted.append(usage.prompt_tokens)
    assert counted == rendered and rendered[0] != rendered[1]
    assert rendered[0] > len(QUESTIONS[0].split())  # the question, not a fixed text
