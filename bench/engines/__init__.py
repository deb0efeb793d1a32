"""Gemma 3 270M side by side with llama-server's n-gram drafting and transformers (run -> ENGINES.md via
report): the rows (rows), how each engine generates (runners), load costs and the replay's prediction
(costs)."""


def __getattr__(name):  # bench/serve imports these from here; loaded on first use, not with the package
    if name in ("versions", "_vocab_tokenizer"):
        from lookupkit.bench.engines import run

        return getattr(run, name)
    raise AttributeError(name)
