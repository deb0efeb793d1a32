"""How a cache is built: corpus → token ids → counts → file (`lookup-create`), and caches added
together (`lookup-merge`).

`pipeline` runs a build (tokenize, count, merge, write; `build_static`, `export_tokens`);
`tokenized` turns a text source into ids through the token store; `parallel` tokenizes and counts in N
processes, `ray_tasks` as Ray tasks; `memory_budget` reads sizes and divides the memory budget;
`outputs` checks the output before the work and keeps it once complete; `merge` is lookup-merge's
streamed merge.
"""

__all__ = ["build_static", "export_tokens"]


def __getattr__(name: str):
    """The pipeline imported at first use (PEP 562): a command's flags (sizes, budgets) load no kernel."""
    if name in __all__:
        from lookupkit.build import pipeline

        face = getattr(pipeline, name)
        globals()[name] = face
        return face
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
