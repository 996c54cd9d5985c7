"""A lean OpenAI-compatible server around one llama-cpp-python model (`llmop up`'s engine).

Run as ``python -m llm_operator.local.engine --model FILE --model_alias ID --port N ...``
(the same flags as ``llama_cpp.server``). llama-cpp-python's own server spent ~10% of the
generation time per token on its request machinery; this one generates in one worker
thread and only relays (bench/local, docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from aiohttp import web

MAX_BODY = 32 * 1024 * 1024
DEFAULT_MAX_TOKENS = 256
DEFAULT_MAX_QUEUE = 8
CHAT_KEYS = ("messages", "temperature", "top_p", "top_k", "min_p", "stop", "seed",
             "presence_penalty", "frequency_penalty", "repeat_penalty", "logit_bias",
             "response_format", "tools", "tool_choice")
COMPLETION_KEYS = ("prompt", "temperature", "top_p", "top_k", "min_p", "stop", "seed",
                   "presence_penalty", "frequency_penalty", "repeat_penalty", "logit_bias",
                   "suffix", "echo")
DONE = object()


class BadRequest(ValueError):
    """A request the model cannot take; the message and ``param`` name the field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def _error(status: int, message: str, kind: str = "invalid_request_error",
           param: str | None = None) -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind, "param": param,
                                        "code": None}}, status=status)


def _flag(value: str) -> bool:
    lowered = value.lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def _lora_flag(value: str) -> tuple[str, str]:
    name, sep, path = value.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=FILE, got {value!r}")
    return name, path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m llm_operator.local.engine",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="GGUF file")
    parser.add_argument("--model_alias", required=True, help="the model id clients send")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    for name in ("n_ctx", "n_threads", "n_threads_batch", "n_batch", "n_ubatch",
                 "n_gpu_layers", "seed"):
        parser.add_argument(f"--{name}", type=int)
    for name in ("rope_freq_base", "rope_freq_scale"):
        parser.add_argument(f"--{name}", type=float)
    for name in ("flash_attn", "use_mlock", "use_mmap", "verbose"):
        parser.add_argument(f"--{name}", type=_flag)
    parser.add_argument("--chat_format")
    parser.add_argument("--default_max_tokens", type=int, default=DEFAULT_MAX_TOKENS,
                        help="the cap on generated tokens when a request names none "
                        f"(default {DEFAULT_MAX_TOKENS}; engineArgs n-predict)")
    parser.add_argument("--max_queue", type=int, default=DEFAULT_MAX_QUEUE,
                        help="requests that may wait for their turn; more get 429 "
                        f"(default {DEFAULT_MAX_QUEUE})")
    parser.add_argument("--lora", action="append", default=[], type=_lora_flag,
                        metavar="NAME=FILE", help="a LoRA adapter (GGUF) served as model NAME; "
                        "repeat for more. Requests pick one by model name, or by llama-server's "
                        "per-request lora: [{id, scale}] (ids in flag order)")
    return parser.parse_args(argv)


Chosen = tuple[tuple[int, float], ...]  # (adapter id, scale), in the order given


def chosen_adapters(body: dict[str, Any], names: list[str]) -> Chosen:
    """The adapters one request asks for: by model name (vLLM's way) or llama-server's lora.

    A ``lora`` list names adapters by id with a scale each; an adapter it leaves out, or
    gives scale 0, is not applied. Without either, the base model answers.
    """
    lora = body.get("lora")
    if lora is None:
        model = body.get("model")
        return ((names.index(model), 1.0),) if model in names else ()
    if not isinstance(lora, list):
        raise BadRequest("lora must be a list of {id, scale}", "lora")
    chosen = []
    for item in lora:
        ident = item.get("id") if isinstance(item, dict) else None
        scale = item.get("scale", 1.0) if isinstance(item, dict) else None
        if not isinstance(ident, int) or isinstance(ident, bool) \
                or not 0 <= ident < len(names):
            known = ", ".join(f"{i}={n}" for i, n in enumerate(names)) or "none loaded"
            raise BadRequest(f"lora: each id must be one of the adapters' ids ({known})",
                             "lora")
        if not isinstance(scale, int | float) or isinstance(scale, bool):
            raise BadRequest("lora: scale must be a number", "lora")
        if scale:
            chosen.append((ident, float(scale)))
    return tuple(chosen)


class Adapters:
    """LoRA adapters loaded beside the model, switched per request on the generation thread.

    ``apply`` sets the adapters on the context (and drops the cached prompt, computed with
    other weights); it runs only when a request wants other adapters than the last one.
    """

    def __init__(self, names: list[str], paths: list[str], apply: Callable[[Chosen], None]
                 ) -> None:
        self.names, self.paths, self._apply = names, paths, apply
        self.current: Chosen = ()
        self.switches = 0

    def use(self, chosen: Chosen) -> None:
        if chosen != self.current:
            self._apply(chosen)
            self.current = chosen
            self.switches += 1


def _max_tokens(body: dict[str, Any]) -> int | None:
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BadRequest("max_tokens must be a positive integer",
                         "max_completion_tokens" if "max_completion_tokens" in body
                         else "max_tokens")
    return value


def request_kwargs(body: Any, chat: bool, default_max_tokens: int = DEFAULT_MAX_TOKENS
                   ) -> dict[str, Any]:
    """The model call's keyword arguments from an OpenAI request body (unknown keys ignored).

    A request without max_tokens gets ``default_max_tokens``: a chat never runs on until
    the context is full, and a completion is not cut at llama-cpp-python's 16 tokens.
    """
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list of {role, content}",
                             "messages")
    elif not isinstance(body.get("prompt"), str):
        raise BadRequest("prompt must be a string", "prompt")
    for key in ("temperature", "top_p"):
        value = body.get(key)
        if value is not None and (not isinstance(value, int | float) or isinstance(value, bool)):
            raise BadRequest(f"{key} must be a number", key)
    keys = CHAT_KEYS if chat else COMPLETION_KEYS
    kwargs = {k: body[k] for k in keys if body.get(k) is not None}
    limit = _max_tokens(body)
    kwargs["max_tokens"] = default_max_tokens if limit is None else limit
    return kwargs


class QueueFull(Exception):
    """More requests are waiting than the engine takes; says when to come back."""

    def __init__(self, waiting: int, retry_after: int) -> None:
        super().__init__(f"{waiting} requests are already waiting for this model")
        self.retry_after = retry_after


class Turns:
    """First come, first served turns on the one generation thread, with a bounded queue."""

    def __init__(self, max_queue: int) -> None:
        self.max_queue = max_queue
        self.waiting = 0
        self.generating = 0
        self.rejected = 0
        self.served = 0
        self.seconds = 1.0  # moving average of a turn's length, for Retry-After
        self._lock = asyncio.Lock()  # its waiters are woken in arrival order

    def retry_after(self) -> int:
        return max(1, math.ceil(self.seconds * (self.waiting + self.generating)))

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """Wait for the thread (QueueFull if too many wait); a cancelled waiter leaves."""
        if self._lock.locked() and self.waiting >= self.max_queue:
            self.rejected += 1
            raise QueueFull(self.waiting, self.retry_after())
        self.waiting += 1
        try:
            await self._lock.acquire()
        finally:
            self.waiting -= 1
        self.generating += 1
        started = time.monotonic()
        try:
            yield
        finally:
            self.generating -= 1
            self.served += 1
            self.seconds = 0.8 * self.seconds + 0.2 * (time.monotonic() - started)
            self._lock.release()

    def metrics(self, alias: str) -> str:
        """Prometheus text exposition of the queue."""
        label = '{model="' + alias.replace("\\", "\\\\").replace('"', '\\"') + '"}'
        return "".join(
            f"# HELP {name} {text}\n# TYPE {name} {kind}\n{name}{label} {value}\n"
            for name, kind, text, value in (
                ("llmop_engine_queue_depth", "gauge",
                 "Requests waiting for the generation thread.", self.waiting),
                ("llmop_engine_generating", "gauge",
                 "Requests generating now (0 or 1).", self.generating),
                ("llmop_engine_requests_rejected_total", "counter",
                 "Requests refused with 429 because the queue was full.", self.rejected),
                ("llmop_engine_requests_served_total", "counter",
                 "Requests that had their turn.", self.served)))


@dataclass(frozen=True)
class Answer:
    """One request's turn: the model name it answers as, its adapters, its stop event."""

    model: str
    adapters: Chosen
    stop: threading.Event


class Engine:
    """One loaded model; requests take turns on one worker thread.

    A client that goes away (plain or streamed) stops its generation at the next token:
    aiohttp cancels the handler, which sets the request's ``stop`` event, and ``llm`` (a
    ``stoppable_llama()``) checks it after every token.
    """

    def __init__(self, llm: Any, alias: str, *, default_max_tokens: int = DEFAULT_MAX_TOKENS,
                 max_queue: int = DEFAULT_MAX_QUEUE, adapters: Adapters | None = None) -> None:
        self.llm, self.alias = llm, alias
        self.adapters = adapters or Adapters([], [], lambda _: None)
        self.default_max_tokens = default_max_tokens
        self.turns = Turns(max_queue)
        self.created = int(time.time())
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="generate")

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.on_cleanup.append(self._close)
        return app

    async def _close(self, _: web.Application) -> None:
        self._worker.shutdown(wait=True, cancel_futures=True)

    async def models(self, _: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": self.alias, "object": "model", "created": self.created,
             "owned_by": "llmop"},
            *({"id": name, "object": "model", "created": self.created, "owned_by": "llmop",
               "parent": self.alias, "root": path}
              for name, path in zip(self.adapters.names, self.adapters.paths, strict=True))]})

    async def health(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "queued": self.turns.waiting,
                                  "generating": self.turns.generating})

    async def metrics(self, _: web.Request) -> web.Response:
        return web.Response(text=self.turns.metrics(self.alias),
                            content_type="text/plain", charset="utf-8")

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, self.llm.create_chat_completion, chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, self.llm.create_completion, chat=False)

    async def _serve(self, request: web.Request, call: Callable[..., Any], *, chat: bool
                     ) -> web.StreamResponse:
        try:
            body = await request.json()
            kwargs = request_kwargs(body, chat, self.default_max_tokens)
            chosen = chosen_adapters(body, self.adapters.names)
        except BadRequest as exc:
            return _error(400, str(exc), param=exc.param)
        except ValueError as exc:  # not JSON
            return _error(400, f"the body is not valid JSON: {exc}")
        stream = body.get("stream") is True
        usage = stream and bool((body.get("stream_options") or {}).get("include_usage"))
        stop = threading.Event()
        named = body.get("model") if body.get("model") in self.adapters.names else None
        answer = Answer(named or self.alias, chosen, stop)
        try:
            async with self.turns.turn():
                if stream:
                    return await self._stream(request, call, kwargs, usage, answer)
                return await self._plain(call, kwargs, answer)
        except QueueFull as exc:
            response = _error(429, f"{exc}; retry in {exc.retry_after}s",
                              "rate_limit_exceeded")
            response.headers["Retry-After"] = str(exc.retry_after)
            return response

    def _prepare(self, answer: Answer) -> None:
        """On the generation thread, before a request generates: its stop event, adapters."""
        self.llm.stop = answer.stop
        self.adapters.use(answer.adapters)

    async def _plain(self, call: Callable[..., Any], kwargs: dict[str, Any],
                     answer: Answer) -> web.Response:
        """Generate the whole answer; a client that leaves stops it at the next token."""
        stop = answer.stop

        def generate() -> Any:
            self._prepare(answer)
            return call(**kwargs)

        produced = asyncio.get_running_loop().run_in_executor(self._worker, generate)
        try:
            result = await asyncio.shield(produced)
        except asyncio.CancelledError:
            stop.set()
            with contextlib.suppress(Exception):
                await produced  # the thread is free again before the next turn
            raise
        except ValueError as exc:  # e.g. the prompt exceeds the context
            return _error(400, str(exc))
        result["model"] = answer.model
        return web.json_response(result)

    async def _stream(self, request: web.Request, call: Callable[..., Any],
                      kwargs: dict[str, Any], usage: bool, answer: Answer
                      ) -> web.StreamResponse:
        """Relay chunks as they are generated; a client that leaves stops the generation."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        stop = answer.stop

        def generate() -> None:
            chunks: Iterator[Any] | None = None
            self._prepare(answer)
            try:
                chunks = call(stream=True, **kwargs)
                for chunk in chunks:
                    loop.call_soon_threadsafe(queue.put_nowait, chunk)
                    if stop.is_set():
                        break
            except ValueError as exc:
                loop.call_soon_threadsafe(queue.put_nowait, exc)
            finally:
                if chunks is not None and hasattr(chunks, "close"):
                    chunks.close()
                loop.call_soon_threadsafe(queue.put_nowait, DONE)

        produced = loop.run_in_executor(self._worker, generate)
        try:
            first = await queue.get()
            if isinstance(first, ValueError):
                await queue.get()
                return _error(400, str(first))
            out = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                              "Cache-Control": "no-cache"})
            await out.prepare(request)
            await self._relay(out, first, queue, usage, answer.model)
        except (ConnectionResetError, asyncio.CancelledError):
            stop.set()
            raise
        finally:
            stop.set()
            await asyncio.shield(produced)
        return out

    async def _relay(self, out: web.StreamResponse, first: Any, queue: asyncio.Queue[Any],
                     usage: bool, model: str) -> None:
        completion = 0
        last: dict[str, Any] = {}
        item = first
        while item is not DONE:
            if isinstance(item, dict):
                item["model"] = model
                last = item
                completion += 1 if _has_text(item) else 0
                await out.write(b"data: " + json.dumps(item).encode() + b"\n\n")
            item = await queue.get()
        if usage and last:
            # The context holds the prompt and every generated token but the last one
            # when generation hit max_tokens (it was sampled, never evaluated).
            cut = (last.get("choices") or [{}])[0].get("finish_reason") == "length"
            prompt = max(0, int(self.llm.n_tokens) - completion + int(cut))
            await out.write(b"data: " + json.dumps({
                **{k: last[k] for k in ("id", "object", "created", "model") if k in last},
                "choices": [], "usage": {"prompt_tokens": prompt,
                                         "completion_tokens": completion,
                                         "total_tokens": prompt + completion}}).encode()
                            + b"\n\n")
        await out.write(b"data: [DONE]\n\n")
        await out.write_eof()


def _has_text(chunk: dict[str, Any]) -> bool:
    for choice in chunk.get("choices") or []:
        if (choice.get("delta") or {}).get("content") or choice.get("text"):
            return True
    return False


def stoppable_llama() -> Any:
    """llama_cpp.Llama whose generations also end once its ``stop`` event is set.

    Chat completions reach the model through ``create_completion`` (the chat handler calls
    it), so one stopping criterion there covers both endpoints, plain and streamed.
    """
    from llama_cpp import Llama, StoppingCriteriaList  # noqa: PLC0415 - the heavy import

    class StoppableLlama(Llama):
        stop = threading.Event()

        def _stopped(self, _ids: Any, _logits: Any) -> bool:
            return self.stop.is_set()

        def create_completion(self, *args: Any, stopping_criteria: Any = None,
                              **kwargs: Any) -> Any:
            kwargs["stopping_criteria"] = StoppingCriteriaList(
                [self._stopped, *(stopping_criteria or [])])
            return super().create_completion(*args, **kwargs)

    return StoppableLlama


def llama_adapters(llm: Any, flags: list[tuple[str, str]]) -> Adapters:
    """Load each ``--lora NAME=FILE`` beside the model (llama.cpp's adapter API).

    Exits with the adapter's name when llama.cpp refuses a file (not a LoRA GGUF, or one
    made for another model).
    """
    import ctypes  # noqa: PLC0415

    import llama_cpp  # noqa: PLC0415 - the heavy import

    handles = []
    for name, path in flags:
        handle = llama_cpp.llama_adapter_lora_init(llm.model, path.encode("utf-8"))
        if not handle:
            raise SystemExit(f"LoRA adapter {name}: llama.cpp could not load {path} (a LoRA "
                             "adapter in GGUF, made for this very model, is needed)")
        handles.append(handle)
        print(f"loaded LoRA adapter {name} from {path}", flush=True)

    def apply(chosen: Chosen) -> None:
        count = len(chosen)
        pointers = (llama_cpp.llama_adapter_lora_p_ctypes * count)(
            *(handles[i] for i, _ in chosen))
        scales = (ctypes.c_float * count)(*(scale for _, scale in chosen))
        if llama_cpp.llama_set_adapters_lora(llm.ctx, pointers, count, scales):
            raise RuntimeError("llama.cpp refused to switch LoRA adapters")
        llm.reset()  # the cached prompt was computed with the adapters before

    return Adapters([n for n, _ in flags], [p for _, p in flags], apply)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    llama = stoppable_llama()  # the heavy import, after the flags parse

    settings = {k: v for k, v in vars(args).items()
                if v is not None and k not in {"model", "model_alias", "host", "port",
                                               "default_max_tokens", "max_queue", "lora"}}
    settings.setdefault("verbose", False)
    started = time.monotonic()
    llm = llama(model_path=args.model, **settings)
    print(f"loaded {args.model} as {args.model_alias} in {time.monotonic() - started:.1f}s",
          flush=True)
    adapters = llama_adapters(llm, args.lora)
    with contextlib.suppress(KeyboardInterrupt):
        engine = Engine(llm, args.model_alias, default_max_tokens=args.default_max_tokens,
                        max_queue=args.max_queue, adapters=adapters)
        web.run_app(engine.app(), host=args.host, port=args.port, handler_cancellation=True,
                    print=lambda line: print(line, flush=True), access_log=None)


if __name__ == "__main__":
    main()
