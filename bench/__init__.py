"""Benchmarks: the load-time, memory and latency study of RESULTS.md, side by side with upstream llama.cpp.

study (the runner behind `lookupkit bench`), measure (subprocess timing and peak memory), llamacpp
(fetches and builds llama.cpp's ngram-cache.cpp with our model-free driver), startup_probe (one open
or replay in a fresh process), startup (import to first draft: warm, fresh install, read-only install,
private memory, which commands pay for numba), sharing (N processes on one mapped cache), pagemodel
(which pages a replay needs), models + calibration (a Qwen2.5-0.5B-shaped random GGUF, its verify-cost
curve, the expected speed-up of the static caches and the cost model against wall clock), report,
report_startup, report_calibration, guards and plots (RESULTS.md and bench/plots/).
"""
