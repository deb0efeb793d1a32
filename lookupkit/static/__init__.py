"""Load: `StaticCache`, a static cache file opened in O(1) (mmap) and looked up in place.

cache (open, lookups, content, verify), lookup (the compiled span and count lookups the drafter
shares), keyrecovery (the 2-grams of a file that does not store them, from its constmap).
"""

from .cache import StaticCache, read_table

__all__ = ["StaticCache", "read_table"]
