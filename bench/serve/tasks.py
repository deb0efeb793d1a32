"""The serving bench's three tasks, their prompts (token ids) and the static cache each one drafts from.

* prose: the first 250 words of a WikiText-103 *valid* paragraph (held out from the caches' train split and
  from every policy table), as bench/generations.py makes them; static corpus: 25 MB of wiki541.txt.zst.
* copy: the same paragraph, a blank line and its first 12 words again (copying pays).
* code: BOS and the first 256 ids of a django 5.0 file that is new or changed since 4.2 (the odd-indexed
  files of bench/suffix_code_task.py's eval.npz: the even ones tuned tables elsewhere); static corpus:
  every .py file of django 4.2 (the earlier release).
* agent (issue 23): sessions like an agent's: each request re-sends the previous prompt and the server's
  response and asks for the next part (the next AGENT_MESSAGE ids of a django 5.0 file the code task does
  not use), AGENT_TURNS turns, and the second turn is sent twice, verbatim (a retry). The history grows
  turn by turn; what the server served earlier is what the next request needs.
* sessions (issue 30; SESSION_TASKS, the `sessions` part): the same conversations with the server's prompt
  cache on, on code (the agent's sessions) and on prose: BOS and the first PROSE_START ids of a WikiText-103
  valid paragraph the prose and copy tasks do not use, then its next AGENT_MESSAGE ids per turn.
"""

from __future__ import annotations

import random
from pathlib import Path

from lookupkit.errors import InputError
from lookupkit.bench.harness import SHARED

TASKS = ("prose", "copy", "code", "agent")
VALID = SHARED / "corpora" / "wiki.valid.tokens"
CODE_PROMPT_TOKENS = 256
# the static cache each task drafts from (lookupkit .lkc, llama-server the same counts as .lcs), in --caches
TASK_CACHE = {"prose": "gemma-wiki25", "copy": "gemma-wiki25", "code": "code-django42", "agent": "code-django42"}
AGENT_TURNS, AGENT_MESSAGE, AGENT_RETRY = 4, 64, 2  # turns per session, ids per user message, the retried turn
SESSION_TASKS = ("prose", "code")  # the sessions part's conversations (TASK_CACHE[task]: their static cache)
PROSE_START = 128  # a prose session's first part in ids: in Gemma 3 ids, ~45 unused valid paragraphs hold 321+, 3 hold 449+
STARTUP_CACHES = {"25MB": "gemma-wiki25", "100MB": "gemma-wiki100", "541MB": "gemma-wiki541"}


def cache_commands(code_dir: str = "CODE_DIR") -> dict:
    """How each cache in --caches is made (the README and the results repeat these)."""
    wiki = "../shared/corpora/wiki541.txt.zst"
    out = {name: f"lookup-create -m gemma-3-270m -f {wiki}" + (f" --max-bytes {label}" if label != "541MB" else "")
           + f" -lcs {name}.lkc" for label, name in STARTUP_CACHES.items()}
    out["code-django42"] = f"lookup-create -m gemma-3-270m -f {code_dir}/corpus.txt -lcs code-django42.lkc"
    out["*.lcs"] = "lookupkit convert NAME.lkc NAME.lcs"
    return out


def prompts(task: str, n: int, seed: int, tokenize, bos: int, code_dir: Path | None, n_new: int) -> list[list[int]]:
    """n prompts of one task as token ids (BOS first), random.Random(seed)-chosen."""
    if task in ("prose", "copy"):
        from lookupkit.bench.generations import prompt_text

        return [tokenize(prompt_text(p, "wiki" if task == "prose" else "copy")) for p in chosen_paragraphs(n, seed)]
    if task == "code":
        from lookupkit.bench.code_engines.run import select_prompts

        if code_dir is None or not (code_dir / "eval.npz").is_file():
            raise InputError("the code task needs --code DIR with eval.npz: python -m lookupkit.bench.suffix_code_task "
                             "-m gemma-3-270m makes it (in $LOOKUPKIT_CACHE_DIR/code-task)")
        return [[bos] + p["ids"] for p in select_prompts(code_dir / "eval.npz", n, seed, CODE_PROMPT_TOKENS, n_new)]
    raise InputError(f"unknown task {task!r} (tasks: {', '.join(TASKS)}; agent: use sessions())")


def chosen_paragraphs(n: int, seed: int, path: Path = VALID) -> list[str]:
    """The paragraphs of the prose and copy tasks' first n prompts."""
    from lookupkit.bench.generations import paragraphs

    return random.Random(seed).sample(paragraphs(_valid(path)), n)


def _valid(path: Path) -> Path:
    if not path.is_file():
        raise InputError(f"{path} not found: the prose prompts come from WikiText-103 valid (../shared/corpora)")
    return path


def sessions(n: int, seed: int, bos: int, code_dir: Path | None, n_new: int, exclude: int) -> list[dict]:
    """n agent sessions: {"start": BOS + a file's first CODE_PROMPT_TOKENS ids, "messages": the next user
    messages}, from the odd-indexed django 5.0 files the code task's first `exclude` prompts do not use."""
    from lookupkit.bench.code_engines.run import select_prompts

    if code_dir is None or not (code_dir / "eval.npz").is_file():
        raise InputError("the agent task needs --code DIR with eval.npz (python -m lookupkit.bench.suffix_code_task)")
    need = CODE_PROMPT_TOKENS + (AGENT_TURNS - 1) * AGENT_MESSAGE
    used = {p["index"] for p in select_prompts(code_dir / "eval.npz", exclude, seed, CODE_PROMPT_TOKENS, n_new)}
    import numpy as np

    with np.load(code_dir / "eval.npz") as z:
        keys = sorted(z.files)
        fit = [(i, z[k]) for i, k in enumerate(keys) if i % 2 == 1 and i not in used and len(z[k]) >= need]
    if len(fit) < n:
        raise InputError(f"{code_dir / 'eval.npz'} has {len(fit)} unused files of >= {need} ids, {n} sessions asked for: "
                         f"--sessions {len(fit)} at most")
    return [_session(i, [bos] + [int(t) for t in ids], 1 + CODE_PROMPT_TOKENS)
            for i, ids in random.Random(seed + 1).sample(fit, n)]


def prose_sessions(n: int, seed: int, tokenize, exclude: set[str], path: Path = VALID) -> list[dict]:
    """n prose sessions: {"start": BOS + a WikiText-103 valid paragraph's first PROSE_START ids, "messages": its
    next ids}, from paragraphs not in `exclude` (the prose and copy tasks'; valid tunes no table either),
    taken in random.Random(seed + 1)'s order among those long enough."""
    from lookupkit.bench.generations import paragraphs

    need = 1 + PROSE_START + (AGENT_TURNS - 1) * AGENT_MESSAGE
    pool = [(i, p) for i, p in enumerate(paragraphs(_valid(path), min_words=1)) if p not in exclude]
    random.Random(seed + 1).shuffle(pool)
    out = []
    for i, para in pool:
        ids = tokenize(" " + para)
        if len(ids) >= need:
            out.append(_session(i, ids, 1 + PROSE_START))
            if len(out) == n:
                return out
    raise InputError(f"{path} has {len(out)} unused paragraphs of >= {need} ids, {n} sessions asked for: "
                     f"--sessions {len(out)} at most")


def _session(index: int, ids: list[int], start: int) -> dict:
    """A session from one text's ids (BOS first): its first `start` ids, then AGENT_TURNS - 1 messages."""
    rest = ids[start:]
    return {"index": index, "start": ids[:start],
            "messages": [rest[k * AGENT_MESSAGE:(k + 1) * AGENT_MESSAGE] for k in range(AGENT_TURNS - 1)]}


def session_plan() -> list[tuple[int, bool]]:
    """(turn, is_retry) in the order a session's requests are sent."""
    plan = []
    for turn in range(1, AGENT_TURNS + 1):
        plan.append((turn, False))
        if turn == AGENT_RETRY:
            plan.append((turn, True))
    return plan
