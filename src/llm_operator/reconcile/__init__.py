"""Reconciliation logic that is pure: observed cluster state -> LLMModel status."""
