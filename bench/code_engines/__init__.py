"""The engines bench on the code task (issue 15): the policy with and without the suffix source (run ->
ENGINES_CODE.md via report)."""


def __getattr__(name):  # bench/serve imports select_prompts from here; loaded on first use
    if name == "select_prompts":
        from lookupkit.bench.code_engines import run

        return run.select_prompts
    raise AttributeError(name)
