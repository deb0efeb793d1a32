// Stand-in for llama.cpp's common/common.h when compiling common/ngram-cache.cpp alone.
// ngram-cache.cpp includes it but uses nothing from it; the real header drags in the whole of common/.
#pragma once
