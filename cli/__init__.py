"""The command line over the library: `lookup-create` (create), `lookup-stats` (stats), `lookup-merge` (merge)
(llama.cpp's names and flags) and the umbrella `lookupkit` (main), one module per command or family: cache_cmds (inspect, verify,
convert), tokenize_cmd, demo, calibrate_cmd, generate_cmd, model_corpus_cmd, serve_cmd, state_merge_cmd (a fleet's
served histories into one), replay_requests_cmd, model_cmd, tune_cmd, bench_cmd; model_options holds the options generate, serve and replay-requests share.

Every command turns lookupkit's errors into one `error: ...` line and a non-zero exit (common.guarded).
"""
