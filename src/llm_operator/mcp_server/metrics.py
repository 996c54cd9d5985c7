"""The MCP server's Prometheus metrics: tool calls, their queueing, tokens and sessions."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

CALL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
WAIT_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class McpMetrics:
    """One registry per server, so several servers (tests) never share counters."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.calls = Counter("llmop_mcp_tool_calls", "Tool calls by tool and outcome (ok, "
                             "invalid_arguments, upstream_error, unreachable, timeout, "
                             "bad_response, guardrail_blocked, guardrail_unavailable).",
                             ["tool", "outcome"], registry=r)
        # the model's guardrails on its tool calls (as the gateway's, by tool)
        self.guard_activations = Counter(
            "llmop_mcp_guardrail_activations", "Guards that found something in a tool call "
            "or its answer, by guard, direction, action and entity type.",
            ["tool", "guard", "direction", "action", "entity"], registry=r)
        self.guard_seconds = Histogram(
            "llmop_mcp_guardrail_seconds", "Time a call's or an answer's guards took.",
            ["tool", "direction"], registry=r)
        self.guard_errors = Counter(
            "llmop_mcp_guardrail_errors", "Checks that could not run (the call failed).",
            ["tool", "direction"], registry=r)
        self.duration = Histogram("llmop_mcp_tool_call_duration_seconds",
                                  "Time a model call took, queueing excluded.", ["tool"],
                                  buckets=CALL_BUCKETS, registry=r)
        self.queued = Gauge("llmop_mcp_tool_calls_queued",
                            "Calls waiting for one of the model's --max-concurrent-calls slots.",
                            ["tool"], registry=r)
        self.in_flight = Gauge("llmop_mcp_tool_calls_in_flight", "Calls the model is answering.",
                               ["tool"], registry=r)
        self.queue_wait = Histogram("llmop_mcp_tool_call_queue_seconds",
                                    "Time a call waited for a slot before it went out.",
                                    ["tool"], buckets=WAIT_BUCKETS, registry=r)
        self.tokens = Counter("llmop_mcp_tokens", "Tokens reported by the models' usage.",
                              ["tool", "kind"], registry=r)
        self.sessions = Gauge("llmop_mcp_sessions",
                              "Open stateful (2025-11-25) sessions.", registry=r)
        self.sessions_ended = Counter(
            "llmop_mcp_sessions_ended_for_cap", "Idle sessions ended because their client "
            "opened one more than sessionsPerClient (its least recently used idle one).",
            registry=r)
        self.key_calls = Counter("llmop_mcp_key_tool_calls",
                                 "Model tool calls by client key id and outcome (ok, error, "
                                 "forbidden, rate_limited).", ["key", "outcome"], registry=r)
        self.auth_failures = Counter("llmop_mcp_auth_failures",
                                     "/mcp requests without a valid bearer token.",
                                     ["reason"], registry=r)
        self.listeners = Gauge("llmop_mcp_legacy_streams",
                               "2025-era sessions with a GET stream open for notifications.",
                               registry=r)
