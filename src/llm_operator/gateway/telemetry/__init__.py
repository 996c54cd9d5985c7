"""What the gateway reports: Prometheus metrics, token tallies, OpenTelemetry spans.

Imports flow control's observer interface and nothing else of the gateway.
"""
