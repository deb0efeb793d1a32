"""How many pairs of runs does `lookupkit generate` need for a verdict that holds? (issue 21) The plain and
drafted runs generate makes, repeated on held-out prompts (run: `python -m lookupkit.bench.verdict`, results
bench/results/generate-verdict-<date>.json); every window of k consecutive pairs judged against all pairs,
and the section of RESULTS.md (report)."""
