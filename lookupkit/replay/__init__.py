"""Replay: llama-lookup-stats' evaluation loop over known text, and what it measures.

run (the one entry point: `Replay(source, n_draft, n_ctx, ...).run(tokens, static, dynamic)` replays any draft
source with the defaults of rules.SOURCE_DEFAULTS; `replay`: the lookup caches' replay, the readable loop of
loop_reference or the compiled one of loop; loop.replay_generation: one generated sequence as an engine drafts it),
longest_match (the `--source ngram` drafter and its replay), suffix_run (`--source suffix`: the run after the
longest corpus match), requests (a served request log replayed with what the server learnt carried across requests:
`lookupkit replay-requests`), trace (`ReplayTrace`: every draft call and the tables derived from it), sweep (grids
of replays, expected speed-up), tuning (the policy's tables learnt on held-out text and its suffix gate chosen by
replaying it: `lookupkit tune-policy`; here, not in lookupkit.policy, because it replays the policy with the
compiled loop, which drafts with it: the policy sits below replay).
"""

from .._lazy import lazy_faces

__all__ = ["Replay", "ReplayTrace", "replay", "replay_generation"]

# A trace or a sweep table loads no kernel.
__getattr__ = lazy_faces(__name__, {"Replay": ".run", "ReplayTrace": ".trace", "replay": ".run",
                                    "replay_generation": ".loop"})
