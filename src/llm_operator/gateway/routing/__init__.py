"""Routes and their upstreams: the route table, picking, breakers, client keys, holds.

``routes`` holds each route's deployments (key, breaker, load) and what can serve now;
``picking`` orders them for a request; ``owners`` says which router replica holds a
model's queue; ``holding`` keeps requests waiting for a replica; ``sleepers`` wakes engines
that take turns on an accelerator; ``looks`` reads busy engines' metrics for flow control.
May import flow, providers, upstream, telemetry, settings and the errors.
"""
