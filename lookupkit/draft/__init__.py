"""Draft: llama.cpp's drafting rule (common_ngram_cache_draft) and lookupkit's policy.

rule_reference (llama.cpp's rule written plainly: the spec in code), rule (the same rule compiled with
numba, checked draft for draft against the reference), policy / policy_reference (lookupkit's policy,
compiled / plainly; confidence: its tables, learnt by replay.tuning (`lookupkit tune-policy`); trust: their online correction on the text at hand), suffix_source
(a static cache's suffix index as a source of the policy), static_source (what both compiled ones read of the static
cache), history (`History`: earlier sequences as a source, shared by drafters), learning (what a finished
sequence teaches the next: one rule for the server and the replay), drafter (`Drafter`, the
public API over the compiled ones).
"""

from .._lazy import lazy_faces

__all__ = ["Drafter", "History"]

# Importing the package compiles or loads no kernel.
__getattr__ = lazy_faces(__name__, {"Drafter": ".drafter", "History": ".history"})
