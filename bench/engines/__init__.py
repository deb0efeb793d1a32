"""Gemma 3 270M side by side with llama-server's n-gram drafting and transformers (run -> ENGINES.md via
report): the rows (rows), how each engine generates (runners), load costs and the replay's prediction
(costs)."""

