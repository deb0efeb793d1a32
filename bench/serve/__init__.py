"""The serving bench (issue 22): `lookupkit serve` beside llama-server b11434, through one client.

    python -m lookupkit.bench.serve --quick                       # 2 prompts x 32 tokens per task
    python -m lookupkit.bench.serve --caches DIR --code DIR       # the run of record (bench/RESULTS.md)
    python -m lookupkit.bench.serve --caches DIR --code DIR --parts sessions --clients 1,4 --sessions 8  # issue 30
    python -m lookupkit.bench.serve.report RESULTS.json --md OUT.md --plot OUT.png
    python -m lookupkit.bench.serve.restart --caches DIR
    python -m lookupkit.bench.serve.overhead                      # the HTTP path alone, the model taken out
    python -m lookupkit.bench.serve.kv_layout                     # a step's cost by its rows' layout, split or unified KV
    python -m lookupkit.bench.serve.same_drafts --caches DIR -o A.json [--python OLD_PY] [--compare B.json]
    python -m lookupkit.bench.serve.fairness --gens GENS.json --mix mixed --mode fixed -o OUT.json  # the pace floor
    python -m lookupkit.bench.serve.step_cost --gens GENS.json --curves A.curve.json,B.curve.json -o OUT.json

One room, one job per module: `client` (a streamed /completion, and N clients at once), `servers` (a
server process of either kind: its command, start-up time, memory), `tasks` (the prompts and caches of
prose, copying, code and the agent-like sessions), `sessions` (a conversation's turns, N of them at once
with the prompt cache), `run` (what runs in which order), `report` (the tables, targets and plot), `bounds` (the
limits beside each row, and the targets), `pooling` (a row's repeats as one level), `sessions_report` (the sessions
part's table and targets),
`restart` (a learning server's speed before and after a restart from its saved state), `overhead` (what
the HTTP path of `lookupkit serve` costs per token and per request, a fake engine in place of the model),
`kv_layout` (what one step costs as the slots lay out their rows, with a KV stream per sequence or one pool),
`same_drafts` (whether a change left every served request's tokens and drafts as they were), `fairness` (what the
pace floor does to the slowest request and the aggregate at 4 clients, in-process, on held-out prompts), `step_cost`
(which verify-cost curve a one-client server's decodes agree with).
"""
