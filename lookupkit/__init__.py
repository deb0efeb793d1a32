"""lookupkit: llama.cpp-exact prompt-lookup drafting from memory-mapped n-gram caches.

The public face: `Tokenizer` (llama.cpp's ids from a GGUF vocabulary, no model), `StaticCache` (a
static 2-gram cache opened in O(1)), `Drafter` (llama.cpp's drafting rule or lookupkit's policy over
context, dynamic and static caches) and `History` (earlier sequences, drafted from by lookupkit's policy). Everything else lives in the
subpackages — tokenizer, corpora, counts, create, formats, static, suffix, policy, draft, replay, integrations, serve,
cli, bench — and in a few modules every room uses: rules (llama.cpp's facts and lookupkit's defaults, named
once, and token_ids, the one validation of ids from outside), errors (one exception family, messages for the
terminal), files (inputs, atomic outputs, the cache directory, a process's peak memory measured one way),
kernels (what the numba modules share), verify_cost (what a draft call and a shared step cost), models (real
models known by name), warmup and compile_notice (the kernels loaded early, a first compile announced once).
"""

from ._lazy import lazy_faces
from ._version import __version__

__all__ = ["Drafter", "History", "StaticCache", "Tokenizer", "__version__"]

# The faces are imported at first use: `import lookupkit` alone loads no numba, so a program pays for the
# compiled kernels only when it drafts.
__getattr__ = lazy_faces(__name__, {"Drafter": ".draft", "History": ".draft", "StaticCache": ".static", "Tokenizer": ".tokenizer"})


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
