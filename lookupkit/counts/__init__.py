"""Count: n-gram follower counts in memory.

tables (the canonical NgramTable / StaticTable every format reads and writes), bigrams (exact
chunked 2-gram counting of a corpus), dict_cache (the readable dict-based context/dynamic cache,
llama.cpp's update and merge), flat (the same caches in flat arrays for the compiled engine),
follower_stats (followers-per-2-gram statistics), high_orders (the top follower of n-grams up to 16, for
the policy), spill and runs (counting within a memory limit: sorted runs on disk and their merge),
match_index (where the sequence last held each m-gram: the longest earlier match, which the policy and
`lookup-stats --source ngram` draw from) and
history_index (the same over earlier sequences, for draft.history).
"""
