"""The options `generate`, `serve`, `replay-requests` and `model-corpus` share (a model to load, its caches, how to
draft, its threads and context),
and the one `--policy` enum lookup-stats uses too: written once, so the commands cannot drift apart."""

from __future__ import annotations

from enum import Enum

import typer

from lookupkit.draft.learning import LEARN_MODES
from lookupkit.rules import DEFAULT_CTX, ENGINE_DRAFT, MAX_DRAFT


class PolicyName(str, Enum):
    llama = "llama.cpp"
    lookupkit = "lookupkit"


LearnMode = Enum("LearnMode", {m: m for m in LEARN_MODES}, type=str)  # serve and replay-requests' --learn


MODEL = typer.Option(..., "-m", "--model", metavar="MODEL.gguf|NAME", help="A GGUF model, or a name "
                     "`lookupkit model --list` knows (e.g. gemma-3-270m).")
LCS = typer.Option(None, "-lcs", "--lookup-cache-static", help="Static cache (lkc, ggngcmap or llama.cpp legacy), "
                   "mapped once and shared by every sequence; without it drafts come from the text so far (and -lcd).")
LCD = typer.Option(None, "-lcd", "--lookup-cache-dynamic", help="Dynamic cache (llama.cpp legacy, must exist) every "
                   "sequence's drafting starts from.")
POLICY = typer.Option(PolicyName.llama, "--policy", help="llama.cpp: its drafting rule, exactly; "
                      "lookupkit: draft only what pays at --verify-cost.")
POLICY_TABLE = typer.Option(None, "--policy-table", metavar="FILE", help="--policy lookupkit: confidence tables "
                            "(default: those learnt on this model's own generations if lookupkit ships them, else "
                            "the bundled ones).")
VERIFY_COST = typer.Option(None, "--verify-cost", metavar="C|CURVE.json", help="Cost of each drafted position "
                           "relative to one decoding step, or the curve `lookupkit calibrate -o` measured on this "
                           "model: the policy drafts by it.")
DRAFT = typer.Option(ENGINE_DRAFT, "--draft", help=f"Most tokens drafted per call (1..{MAX_DRAFT}).")
THREADS = typer.Option(2, "-t", "--threads", help="Threads, for single tokens and batches alike.")
GENERATE_CTX = typer.Option(DEFAULT_CTX, "-c", "--ctx-size", help="Context size (prompt + generated tokens).")
