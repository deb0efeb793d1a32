"""What a finished sequence teaches the sequences after it: one rule for `lookupkit serve --learn` and for
the replay of a request log (replay.requests), so the replay predicts what the server does.

* off: nothing (every sequence drafts from the caches as loaded plus its own context; no request's text
  reaches another's drafts);
* dynamic: the Drafter's own dynamic cache learns it (llama.cpp's -lcd rule);
* history: the History the Drafter drafts from (draft.history, shared by a server's slots) learns it.

Drafts are verified by the model, so what is learnt never changes an output, only its speed.
"""

from __future__ import annotations

from ..errors import InputError

LEARN_MODES = ("off", "dynamic", "history")


def check_learn(learn: str) -> str:
    if learn not in LEARN_MODES:
        raise InputError(f"learn must be one of {', '.join(LEARN_MODES)}, got {learn!r}")
    return learn


def end_sequence(drafter, learn: str, ok: bool = True) -> bool:
    """End the drafter's sequence, learning it as `learn` says (nothing when the sequence failed: ok=False);
    True when it went into a History."""
    into_history = check_learn(learn) == "history" and ok and drafter.history is not None
    if into_history:
        drafter.history.learn(drafter.sequence)
    drafter.reset(learn=learn == "dynamic" and ok)
    return into_history
