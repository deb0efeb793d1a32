"""lookupkit: llama.cpp-exact prompt-lookup drafting from memory-mapped n-gram caches."""

__version__ = "0.1.0"
from .drafter import Drafter  # noqa: E402,F401  (the public drafting API)
from .static import StaticCache  # noqa: E402,F401  (after __version__, which the formats import)
