"""A model's own greedy generations of held-out prompts: what the policy's tables are tuned on.

The policy decides from confidence tables (policy.confidence); tables learnt on human text under-rate how
often a small base model repeats itself under greedy decoding, so for a real model they are learnt on
that model's own output. Prompts come from the WikiText-103 *test* split (../shared/corpora/wiki.test.raw),
which neither the static caches (built from wiki541.txt.zst, which excludes its articles) nor the engines
bench (WikiText-103 *valid*) ever sees: the tables are never tuned on what is reported.

Two tasks, as the engines bench has them: `wiki` (a paragraph's first 250 words, then the model
continues) and `copy` (the same paragraph, a blank line, and its own first 12 words again, so that
copying pays).

    python -m lookupkit.bench.generations -m gemma-3-270m -o gens.json [--prompts 32] [-n 256]
    lookupkit tune-policy --generations gens.json --cache wiki100-o6.lkc -o table.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

from lookupkit.bench.harness import SHARED, entry, write_text

CORPORA = SHARED / "corpora"
PROMPT_WORDS = 250
RESTART_WORDS = 12


def paragraphs(path: Path, min_words: int = PROMPT_WORDS) -> list[str]:
    """WikiText paragraphs (not headings) of at least min_words words, in file order."""
    lines = path.read_text(encoding="utf-8").split("\n")
    return [ln.strip() for ln in lines if len(ln.split()) >= min_words and not ln.strip().startswith("=")]


def prompt_text(paragraph: str, task: str) -> str:
    """The prompt of one task from a paragraph: its first PROMPT_WORDS words, and for `copy` a blank line
    and its first RESTART_WORDS words again."""
    words = paragraph.split()[:PROMPT_WORDS]
    text = " " + " ".join(words)
    if task == "copy":
        text += "\n\n " + " ".join(words[:RESTART_WORDS])
    elif task != "wiki":
        raise ValueError(f"unknown task {task!r}")
    return text


def select(path: Path, n: int, seed: int) -> list[str]:
    paras = paragraphs(path)
    return random.Random(seed).sample(paras, min(n, len(paras)))


def _main(argv) -> None:
    ap = argparse.ArgumentParser(prog="python -m lookupkit.bench.generations", description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", required=True, help="GGUF model path or a lookupkit.models name")
    ap.add_argument("-o", "--output", type=Path, required=True)
    ap.add_argument("--text", type=Path, default=CORPORA / "wiki.test.raw", help="held-out text to take prompts from")
    ap.add_argument("--prompts", type=int, default=32, help="paragraphs (each gives one prompt per task)")
    ap.add_argument("--tasks", default="wiki,copy")
    ap.add_argument("-n", "--new-tokens", type=int, default=256)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=13)
    a = ap.parse_args(argv)
    import llama_cpp

    from lookupkit import models

    model = str(models.resolve(a.model))
    llm = llama_cpp.Llama(model_path=model, n_ctx=2048, n_threads=a.threads, n_threads_batch=a.threads, verbose=False)
    doc = {"model": os.path.basename(model), "text": a.text.name, "seed": a.seed, "prompt_words": PROMPT_WORDS,
           "new_tokens": a.new_tokens, "sequences": []}
    if a.output.exists():  # resume: the paragraphs already generated are kept (greedy output is reproducible)
        old = json.loads(a.output.read_text())
        if {k: v for k, v in old.items() if k != "sequences"} == {k: v for k, v in doc.items() if k != "sequences"}:
            doc = old
    done = {(g["paragraph"], g["task"]) for g in doc["sequences"]}
    t0 = time.perf_counter()
    for i, para in enumerate(select(a.text, a.prompts, a.seed)):
        for task in a.tasks.split(","):
            if (i, task) in done:
                continue
            prompt = llm.tokenize(prompt_text(para, task).encode(), add_bos=True, special=True)
            gen = []
            for tok in llm.generate(prompt, temp=0.0, top_k=1, reset=True):
                if tok == llm.token_eos() or len(gen) >= a.new_tokens:
                    break
                gen.append(int(tok))
            doc["sequences"].append({"task": task, "paragraph": i, "prompt_len": len(prompt),
                                     "tokens": list(prompt) + gen})
        write_text(a.output, json.dumps(doc))  # after every paragraph: an interrupt loses one
        print(f"{i + 1}/{a.prompts} paragraphs, {time.perf_counter() - t0:.0f} s", flush=True)
    out = doc["sequences"]
    print(f"wrote {a.output}: {len(out)} sequences")


def main(argv=None) -> None:
    entry(_main, argv)


if __name__ == "__main__":
    main()
