"""Benchmarks: the load-time, memory and latency study of RESULTS.md, side by side with upstream llama.cpp.

study (the runner behind `lookupkit bench`), measure (subprocess timing and peak memory), llamacpp
(fetches and builds llama.cpp's ngram-cache.cpp with our model-free driver), startup_probe (one open
or replay in a fresh process), sharing (N processes on one mapped cache), pagemodel (which pages a
replay needs), report and plots (RESULTS.md and bench/plots/).
"""
