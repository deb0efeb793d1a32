"""How a cache is built: corpus → token ids → counts → file (`lookup-create`), and caches added
together (`lookup-merge`).

`pipeline` runs a build (tokenize, count, merge, write; `build_static`, `export_tokens`);
`tokenized` turns a text source into ids through the token store; `parallel` tokenizes and counts in N
processes, `ray_tasks` as Ray tasks; `memory_budget` reads sizes and divides the memory budget;
`outputs` checks the output before the work and keeps it once complete; `merge` is lookup-merge's
streamed merge.
"""

from lookupkit._lazy import lazy_faces

__all__ = ["build_static", "export_tokens"]

# A command's flags (sizes, budgets) load no kernel.
__getattr__ = lazy_faces(__name__, {"build_static": ".pipeline", "export_tokens": ".pipeline"})
