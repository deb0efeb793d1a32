"""Load: `StaticCache`, a static cache file opened in O(1) (mmap) and looked up in place.

cache (open, lookups, content, verify), lookup (the compiled span and count lookups the drafter
shares), high_orders (the higher-order maps as the compiled policy reads them), keyrecovery (the
2-grams of a file that does not store them, from its constmap).
"""

__all__ = ["StaticCache", "read_table"]


def __getattr__(name: str):
    """The faces imported at first use (PEP 562), so a module of the package imports alone."""
    if name in __all__:
        from . import cache

        globals().update(StaticCache=cache.StaticCache, read_table=cache.read_table)
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
