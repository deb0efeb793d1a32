"""lookupkit: llama.cpp-exact prompt-lookup drafting from memory-mapped n-gram caches.

The public face: `Tokenizer` (llama.cpp's ids from a GGUF vocabulary, no model), `StaticCache` (a
static 2-gram cache opened in O(1)) and `Drafter` (llama.cpp's drafting rule over context, dynamic
and static caches). Everything else lives in the subpackages: tokenizer, counts, static, draft,
replay, formats, corpora, integrations, cli, bench.
"""

from ._version import __version__

__all__ = ["Drafter", "StaticCache", "Tokenizer", "__version__"]


def __getattr__(name: str):
    """The public faces, imported at first use (PEP 562): `import lookupkit` alone loads no numba, so a
    program pays for the compiled kernels only when it drafts."""
    if name == "Drafter":
        from .draft import Drafter as face
    elif name == "StaticCache":
        from .static import StaticCache as face
    elif name == "Tokenizer":
        from .tokenizer import Tokenizer as face
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = face
    return face


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
