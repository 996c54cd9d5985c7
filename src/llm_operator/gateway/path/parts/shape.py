"""Shape: how the request is asked of each upstream (stream, usage, model id, translation)."""

from __future__ import annotations

import json
from typing import Any

from llm_operator.gateway.path.exchange import Exchange
from llm_operator.gateway.routing.routes import CHAT_PATH, Deployment, Outbound, RouteState

USAGE_OPTION_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})


def _asks_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


class Shape:
    """Sets ``stream``, ``hide_usage``, ``collect``, ``outbound``; edits ``body``.

    Usage is what limits and cost are counted from: it is asked for on every stream, and
    the usage event kept from clients that did not ask (hide_usage). A plain answer is
    asked of the upstream as a stream where the route says so (streamUpstream: leaving
    clients then stop the generation) and assembled in Relay (collect).
    """

    def __call__(self, ex: Exchange) -> None:
        body, path = ex.body, ex.request.path
        stream = ex.stream = body.get("stream") is True
        hide_usage = ex.hide_usage = stream and path in USAGE_OPTION_PATHS \
            and not _asks_usage(body)
        if hide_usage:
            options = body.get("stream_options")
            body["stream_options"] = {**(options if isinstance(options, dict) else {}),
                                      "include_usage": True}
        collect = ex.collect = not stream and ex.state.route.stream_upstream \
            and path in USAGE_OPTION_PATHS and not ex.anthropic
        if collect:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        ex.outbound = Outbounds(ex.state, ex.model, ex.raw, body, stream=stream,
                                rewrite=hide_usage or collect,
                                path=CHAT_PATH if ex.anthropic else path.removeprefix("/v1"))


class Outbounds:
    """The request for each deployment: the client's bytes unless its model id differs.

    A native API gets a translation (Untranslatable if there is none); each is built once.
    """

    def __init__(self, state: RouteState, model: str, raw: bytes, body: dict[str, Any], *,
                 stream: bool, rewrite: bool, path: str) -> None:
        self.state, self.model, self.raw, self.body = state, model, raw, body
        self.stream, self.rewrite, self.path = stream, rewrite, path
        self.payloads: dict[str, bytes] = {}
        self.translated: dict[str, Outbound] = {}

    def __call__(self, deployment: Deployment) -> Outbound:
        route, body = self.state.route, self.body
        upstream_model = route.upstream_model(deployment.upstream)
        if deployment.native is not None:
            if deployment.label not in self.translated:
                self.translated[deployment.label] = deployment.translate(
                    body, upstream_model, path=self.path, stream=self.stream)
            return self.translated[deployment.label]
        url = f"{deployment.url_base}{self.path}"
        fields = route.set_fields
        defaults = {k: v for k, v in route.default_fields.items() if k not in body}
        if upstream_model == self.model and not (self.rewrite or fields or defaults):
            return Outbound(url, self.raw)
        if upstream_model not in self.payloads:
            self.payloads[upstream_model] = json.dumps(
                {**defaults, **body, "model": upstream_model, **fields},
                separators=(",", ":")).encode()
        return Outbound(url, self.payloads[upstream_model])
