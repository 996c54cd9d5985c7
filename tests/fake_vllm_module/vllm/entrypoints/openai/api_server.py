"""Stands in for vLLM's OpenAI server module: runs tests/fake_vllm_process.py's fake."""

from fake_vllm_process import main

if __name__ == "__main__":
    main()
