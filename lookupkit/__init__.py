"""lookupkit: llama.cpp-exact prompt-lookup drafting from memory-mapped n-gram caches."""

__version__ = "0.1.0"

from .drafter import Drafter  # noqa: E402
from .static import StaticCache  # noqa: E402
from .tokenizer import Tokenizer  # noqa: E402

__all__ = ["Drafter", "StaticCache", "Tokenizer", "__version__"]
