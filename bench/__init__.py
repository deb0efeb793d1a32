"""Benchmarks (bench/RESULTS.md): one subpackage per study, each with its runner (`run`, `python -m
lookupkit.bench.STUDY`; `study` runs through `lookupkit bench`) and its report (a `report` module, or inside
`run` where it is short: sources, scale, tokenize_corpora), over one harness (`harness`: provenance, ../shared, output paths,
the quiet-machine gate, spread statistics, the report's guards, the entry point) and a few shared tools
that several studies run (models, llama_server, llamacpp, measure, startup_probe, generations,
suffix_code_task). The studies: study (`lookupkit bench` runs it), startup, calibration, engines,
code_engines, suffix, scale, tokenize_corpora, serve (the server beside llama-server, and the HTTP path's
own overhead), sources (which draft source pays on the model's own output), verdict (how many run pairs
`lookupkit generate` needs for a verdict that holds) and policy_pays (does lookupkit's policy make drafting
pay)."""
