"""Issue 15's suffix index: what it costs and what drafting from it pays (run, report -> SUFFIX.md). Its
answered questions are retired studies, their records kept: the suffix-array builders judged (formats/SPEC.md),
what the index alone would draft over a text (superseded by this study's replays), the membership filter in
front of it (SUFFIX_FILTER.md)."""
