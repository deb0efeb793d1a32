"""Will prompt lookup pay on a 0.5B model here? The verify-cost curve of a random-weight Qwen2.5-0.5B-shaped
GGUF, the expected speed-up of the study's caches and the cost model against wall clock (run), and its
section of RESULTS.md (report)."""
