"""`lookupkit serve`: an OpenAI-compatible HTTP server (and llama-server's /completion) drafting with lookupkit.

One module per job: `config` checks every setting once (a frozen ServeConfig), `startup` opens everything once
(model, caches, tables, kernels, chat template), `lifecycle` starts and stops it all in order (one owner),
`engine` is the thread that owns the llama.cpp context and batches every slot's verify step, `slots`
the slots it serves them through and the prompt cache each keeps,
`sampling` picks tokens and verifies drafts so that drafting never changes the output distribution,
`text` turns ids into streamed text with stop strings, `protocol` validates requests and shapes
refusals, `responses` builds OpenAI and llama-server bodies, `metrics` the Prometheus text, `chat` the
chat template as llama-server renders it, `utility` llama-server's /tokenize, /detokenize, /apply-template,
/props and /slots, `tenants` whose history a request drafts from and learns
into (--learn history: its API key's or `user`'s, bounded), `state` the tenants' file (--state) and the
merge of a fleet's files, and `app` the HTTP routes (and API keys). Needs `lookupkit[serve,llama]`;
nothing here is imported by the load/draft path.
"""
