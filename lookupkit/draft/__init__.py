"""Draft: llama.cpp's drafting rule (common_ngram_cache_draft).

reference (the rule written plainly: the spec in code), fast (the same rule compiled with numba,
checked draft for draft against the reference), drafter (`Drafter`, the public API over the fast one).
"""

from .drafter import Drafter

__all__ = ["Drafter"]
