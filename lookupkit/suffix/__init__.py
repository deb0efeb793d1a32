"""A suffix index over a corpus' token ids: the longest earlier match anywhere in the corpus, and the run of
tokens its occurrences agree on: build (the text and its suffix array), merge (the out-of-core
sort when it exceeds the memory budget), write (the sections lookup-create writes), search (longest match
and continuation, compiled), reference (their readable definition). On disk it is the .lkc version-3 sections
(formats.lkc_suffix, which defines the format's constants; `lookup-create --suffix-index` builds them with
write.build_part; `StaticCache.suffix` hands them out); the policy drafts from it through
policy.suffix_source, calling the kernels search.longest_match_kernel and continuation_kernel.

    text = corpus_text(docs)                 # ids of every document, each followed by SEPARATOR
    index = build_index(text)                # suffix array (libdivsufsort), first-token table
    m, lo, hi = longest_match(index, context, max_len=64)
    run = continuation(index, m, lo, hi, max_tokens=16, min_share=0.5)
"""

from .build import SEPARATOR, build_index, corpus_text, SuffixIndex
from .search import continuation, longest_match, Run

__all__ = ["SEPARATOR", "SuffixIndex", "build_index", "corpus_text", "longest_match", "continuation", "Run"]
