"""Count: n-gram follower counts in memory.

tables (the canonical NgramTable / StaticTable every format reads and writes), bigrams (exact
chunked 2-gram counting of a corpus), dict_cache (the readable dict-based context/dynamic cache,
llama.cpp's update and merge), flat (the same caches in flat arrays for the compiled engine),
follower_stats (followers-per-2-gram statistics).
"""
