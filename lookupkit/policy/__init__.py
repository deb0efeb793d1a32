"""The policy: lookupkit's drafting policy, which drafts a token only while its expected acceptance pays for
verifying it.

chain (the policy compiled: every source's candidate, the chain, the prefix that pays), reference (the same
policy written plainly, the spec chain is tested against), confidence (its tables: evidence to P(accepted),
bundled or learnt by replay.tuning, `lookupkit tune-policy`), trust (their online correction on the text at
hand), suffix_source (a static cache's suffix index as one of its sources). It sits below draft (the
`Drafter` drafts with it) and replay (which replays it and tunes its tables); llama.cpp's rule is draft's.
"""

from .._lazy import lazy_faces

__all__ = ["for_model"]

# Importing the package compiles or loads no kernel.
__getattr__ = lazy_faces(__name__, {"for_model": ".confidence"})
