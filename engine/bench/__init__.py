"""Every benchmark, one entry shape: `run(model_path, ...) -> dict` of figures (JSON-ready) and
`format_report(figures) -> str`. `llmchat bench` (tui/cli) picks one by its flags and prints either.

    throughput   decode, sessions, prefill, cached-prefix TTFT, memory, % of the bandwidth roof; transformers
                 and llama.cpp (llama_cpp.py, gguf_quality.py) as baselines in the same run
    context      decode speed after long prompts
    determinism  the cost of EngineConfig.deterministic
    lora         sessions over adapters vs base sessions
    serve        the HTTP API's cost over the in-process engine
    kernels      paged attention vs torch SDPA and the machine's read bandwidth, no model: run(contexts, ...)
                 (`llmchat bench --kernels`, `python -m llmchat.engine.bench.kernels`)
Shared pieces (seeded prompts, the baselines' environment) are in common.py.
"""
