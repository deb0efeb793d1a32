"""Draft: llama.cpp's drafting rule (common_ngram_cache_draft) and lookupkit's policy.

rule_reference (llama.cpp's rule written plainly: the spec in code), rule (the same rule compiled with
numba, checked draft for draft against the reference), policy / policy_reference (lookupkit's policy,
compiled / plainly; confidence: its tables), static_source (what both compiled ones read of the static
cache), drafter (`Drafter`, the public API over the compiled ones).
"""

__all__ = ["Drafter"]


def __getattr__(name: str):
    """`Drafter` imported at first use (PEP 562): importing the package compiles or loads no kernel."""
    if name == "Drafter":
        from .drafter import Drafter

        globals()[name] = Drafter
        return Drafter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
