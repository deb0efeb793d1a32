"""The load-time, memory and latency study behind `lookupkit bench` (bench/RESULTS.md): static caches of
growing corpus prefixes built, opened and replayed by lookupkit and by llama.cpp's own code (run), N processes
on one mapping (sharing), which pages a replay needs (pagemodel), and RESULTS.md with its plots (report, plots)."""
