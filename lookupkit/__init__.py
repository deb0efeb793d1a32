"""lookupkit: llama.cpp-exact prompt-lookup drafting from memory-mapped n-gram caches."""

__version__ = "0.1.0"
