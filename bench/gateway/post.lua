-- wrk script: POST a small chat completion request.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
-- LiteLLM requires a master key; the other paths ignore this header.
wrk.headers["Authorization"] = "Bearer sk-bench-master-key-0123456789abcdef"
wrk.body = '{"model":"bench","messages":[{"role":"user","content":"Say hello in five words."}],"max_tokens":16}'
