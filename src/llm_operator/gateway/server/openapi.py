"""The gateway's OpenAPI 3.1 description (``GET /openapi.json``): its endpoints and bodies.

What clients, API tools and the test suite's fuzzer read. The request bodies are described
as the gateway reads them: the fields it looks at, typed, and any other field allowed (it
is passed to the model's server as sent). Every error is OpenAI's ``{"error": {...}}``.
"""

from __future__ import annotations

from typing import Any

VERSION = "v1"
TEXT: dict[str, Any] = {"type": "string"}
TEXTS: dict[str, Any] = {"oneOf": [TEXT, {"type": "array", "items": TEXT}]}
MODEL: dict[str, Any] = {"type": "string", "minLength": 1,
                         "description": "A model id the gateway serves (GET /v1/models)."}
MESSAGE: dict[str, Any] = {
    "type": "object", "required": ["role"], "additionalProperties": True,
    "properties": {
        "role": {"type": "string", "enum": ["system", "developer", "user", "assistant",
                                            "tool"]},
        "content": {"oneOf": [TEXT, {"type": "null"}, {"type": "array", "items": {
            "type": "object", "additionalProperties": True,
            "properties": {"type": TEXT, "text": TEXT}}}]},
        "tool_calls": {"type": "array", "items": {
            "type": "object", "additionalProperties": True, "properties": {
                "id": TEXT, "type": TEXT, "function": {
                    "type": "object", "additionalProperties": True,
                    "properties": {"name": TEXT, "arguments": TEXT}}}}},
    },
}
SAMPLING: dict[str, Any] = {
    "max_tokens": {"type": "integer", "minimum": 1},
    "temperature": {"type": "number", "minimum": 0, "maximum": 2},
    "stream": {"type": "boolean"},
    "stop": TEXTS,
}


def _body(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": required, "additionalProperties": True,
            "properties": properties}


BODIES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": _body(["model", "messages"], {
        "model": MODEL, "messages": {"type": "array", "minItems": 1, "items": MESSAGE},
        **SAMPLING, "stream_options": {"type": "object", "properties": {
            "include_usage": {"type": "boolean"}}},
        "logprobs": {"type": "boolean"}, "top_logprobs": {"type": "integer", "minimum": 0}}),
    "/v1/completions": _body(["model", "prompt"], {
        "model": MODEL, "prompt": TEXTS, **SAMPLING,
        "logprobs": {"type": "integer", "minimum": 0}}),
    "/v1/embeddings": _body(["model", "input"], {"model": MODEL, "input": TEXTS}),
    "/v1/responses": _body(["model", "input"], {
        "model": MODEL, "instructions": TEXT,
        "input": {"oneOf": [TEXT, {"type": "array", "items": {
            "type": "object", "additionalProperties": True}}]},
        "stream": {"type": "boolean"}}),
    "/v1/messages": _body(["model", "messages", "max_tokens"], {
        "model": MODEL, "max_tokens": {"type": "integer", "minimum": 1},
        "system": {"oneOf": [TEXT, {"type": "array"}]},
        "messages": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["role", "content"], "additionalProperties": True,
            "properties": {"role": {"type": "string", "enum": ["user", "assistant"]},
                           "content": {"oneOf": [TEXT, {"type": "array"}]}}}},
        "stream": {"type": "boolean"}}),
    "/v1/moderations": _body(["model", "input"], {"model": MODEL, "input": TEXTS}),
}
SUMMARIES = {
    "/v1/chat/completions": "OpenAI's Chat Completions, routed by model",
    "/v1/completions": "OpenAI's (legacy) Completions, routed by model",
    "/v1/embeddings": "OpenAI's Embeddings, routed by model",
    "/v1/responses": "OpenAI's Responses API, routed by model",
    "/v1/messages": "Anthropic's Messages API, translated for any model",
    "/v1/moderations": "OpenAI's Moderations, by the model's guardrails",
}
GETS = {
    "/v1/models": "The models this caller may use",
    "/health": "Liveness: the process serves",
    "/ready": "Readiness: every route is configured",
    "/metrics": "Prometheus metrics",
    "/openapi.json": "This description",
}
ERROR: dict[str, Any] = {"type": "object", "required": ["error"], "properties": {
    "error": {"type": "object", "required": ["message", "type"], "properties": {
        "message": TEXT, "type": TEXT, "param": {"type": ["string", "null"]},
        "code": {"type": ["string", "null"]}}}}}


def _errors() -> dict[str, Any]:
    described = {"400": "the body names what to fix", "401": "no key, or an unknown one",
                 "403": "the key may not use this model", "404": "no such model",
                 "413": "more than the gateway or the model's guardrails read",
                 "429": "a limit, budget or queue: Retry-After says when",
                 "502": "the model's server failed, or its answer could not be checked",
                 "503": "no replica now, or guardrails that cannot run",
                 "504": "the model's server did not answer in time"}
    return {code: {"description": text, "content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/Error"}}}} for code, text in described.items()}


def description(batches: bool) -> dict[str, Any]:
    """The OpenAPI document; ``batches``: the Files and Batch endpoints are served too."""
    paths: dict[str, Any] = {}
    for path, schema in BODIES.items():
        paths[path] = {"post": {
            "summary": SUMMARIES[path], "operationId": path.strip("/").replace("/", "_"),
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": schema}}},
            "responses": {"200": {"description": "the model's answer (a JSON object, or "
                                  "server-sent events with stream: true)", "content": {
                                      "application/json": {"schema": {"type": "object"}},
                                      "text/event-stream": {"schema": TEXT}}},
                          **_errors()}}}
    for path, summary in GETS.items():
        paths[path] = {"get": {"summary": summary,
                               "operationId": "get_" + path.strip("/").replace("/", "_")
                               .replace(".", "_"),
                               "responses": {"200": {"description": summary}}}}
    if batches:
        paths["/v1/files"] = {"get": {"summary": "This key's files", "operationId":
                                      "list_files", "responses": {"200": {
                                          "description": "a list"}, **_errors()}}}
        paths["/v1/batches"] = {
            "get": {"summary": "This key's batches", "operationId": "list_batches",
                    "responses": {"200": {"description": "a list"}, **_errors()}},
            "post": {"summary": "A batch of an uploaded file's requests",
                     "operationId": "create_batch",
                     "requestBody": {"required": True, "content": {"application/json": {
                         "schema": _body(["input_file_id", "endpoint", "completion_window"],
                                         {"input_file_id": TEXT, "endpoint": TEXT,
                                          "completion_window": TEXT,
                                          "metadata": {"type": "object"}})}}},
                     "responses": {"200": {"description": "the batch"}, **_errors()}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "llm-operator gateway", "version": VERSION,
                 "description": "One OpenAI-compatible endpoint for every model: routing, "
                 "client keys, limits, guardrails, flow control (docs/gateway.md)."},
        "paths": paths,
        "components": {"schemas": {"Error": ERROR}, "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer",
                       "description": "A client key, where the gateway has clientKeys"}}},
        "security": [{}, {"bearer": []}],
    }
