"""`python -m llm_operator`: the llmop command (how `llmop up --detach` starts itself)."""

from llm_operator.cli.main import main

main()
