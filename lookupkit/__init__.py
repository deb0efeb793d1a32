"""lookupkit: llama.cpp-exact prompt-lookup drafting from memory-mapped n-gram caches.

The public face: `Tokenizer` (llama.cpp's ids from a GGUF vocabulary, no model), `StaticCache` (a
static 2-gram cache opened in O(1)) and `Drafter` (llama.cpp's drafting rule over context, dynamic
and static caches). Everything else lives in the subpackages: tokenizer, counts, static, draft,
replay, formats, corpora, integrations, cli, bench.
"""

from ._version import __version__
from .draft import Drafter
from .static import StaticCache
from .tokenizer import Tokenizer

__all__ = ["Drafter", "StaticCache", "Tokenizer", "__version__"]
