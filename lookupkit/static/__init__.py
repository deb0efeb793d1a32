"""Load: `StaticCache`, a static cache file opened in O(1) (mmap) and looked up in place.

cache (open, lookups, content, verify), lookup (the compiled span and count lookups the drafter
shares), source (the cache as both compiled drafting rules read it, with a memo of its 2-grams), high_orders (the higher-order maps as the compiled policy reads them), keyrecovery (the
2-grams of a file that does not store them, from its constmap).
"""

from .._lazy import lazy_faces

__all__ = ["StaticCache", "read_table"]

# A module of the package imports alone.
__getattr__ = lazy_faces(__name__, {"StaticCache": ".cache", "read_table": ".cache"})
