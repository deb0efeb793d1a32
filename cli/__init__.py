"""The command line, a thin layer over the library: `lookup-create`, `lookup-stats`, `lookup-merge` (llama.cpp's
names and flags) and the umbrella `lookupkit` (inspect, verify, convert, tokenize, demo, bench).

Every command turns lookupkit's errors into one `error: ...` line and a non-zero exit (common.guarded).
"""
