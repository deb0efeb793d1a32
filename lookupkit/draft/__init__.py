"""Draft: `Drafter`, llama.cpp's drafting rule (common_ngram_cache_draft) or lookupkit's policy over the
context, dynamic and static caches and a history.

rule_reference (llama.cpp's rule written plainly: the spec in code), rule (the same rule compiled with
numba, checked draft for draft against the reference), history (`History`: earlier sequences, state a server
keeps and its drafters share, as they share the dynamic cache; the policy drafts from it, through the
kernels of counts.history_index), learning (what a finished sequence teaches the next: one rule for the server and the
replay), drafter (`Drafter`, the public API over the compiled rule and the policy, which has its own room:
lookupkit.policy).
"""

from .._lazy import lazy_faces

__all__ = ["Drafter", "History"]

# Importing the package compiles or loads no kernel.
__getattr__ = lazy_faces(__name__, {"Drafter": ".drafter", "History": ".history"})
