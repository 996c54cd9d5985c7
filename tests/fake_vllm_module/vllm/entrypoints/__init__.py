"""Part of the stand-in for vLLM (tests/fake_vllm_process.py)."""
