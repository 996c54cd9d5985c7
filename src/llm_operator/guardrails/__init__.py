"""Guardrails: detectors, guards over a body's text, the runner the gateway and MCP share."""
