"""Replay: llama-lookup-stats' evaluation loop over known text, and what it measures.

run (`replay`: the readable loop of loop_reference or the compiled one of loop; loop.replay_generation:
one generated sequence as an engine drafts it), longest_match (the
`--source ngram` drafter and its replay), trace (`ReplayTrace`: every draft call and the tables
derived from it), sweep (grids of replays, expected speed-up).
"""

__all__ = ["ReplayTrace", "replay", "replay_generation"]


def __getattr__(name: str):
    """The faces imported at first use (PEP 562): a trace or a sweep table loads no kernel."""
    if name == "replay_generation":
        from .loop import replay_generation as face
    elif name == "replay":
        from .run import replay as face
    elif name == "ReplayTrace":
        from .trace import ReplayTrace as face
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = face
    return face
