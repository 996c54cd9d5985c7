"""llm-operator: LLMs as first-class Kubernetes citizens (API, planner, rendering, runtimes)."""

__version__ = "0.1.0"
