"""The model's greedy outputs of the serving bench's prompts (bench.serve.tasks, one --seed): what the sources
study replays. `python -m lookupkit.bench.sources.generations --seed 22 -o gens.json` (lookupkit's own loop,
plain; the JSON is `python -m lookupkit.bench.generations`' shape, so `lookupkit tune-policy --generations`
reads it too)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lookupkit.bench.harness import entry, git_state, machine, write_text

TASKS = ("prose", "copy", "code")


def run(argv) -> None:
    ap = argparse.ArgumentParser(prog="python -m lookupkit.bench.sources.generations", description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", default="gemma-3-270m")
    ap.add_argument("--seed", type=int, required=True, help="the serving bench's prompt seed (22 is reported, 99 tunes)")
    ap.add_argument("--prompts", type=int, default=12, help="prompts per task")
    ap.add_argument("-n", "--n-new", type=int, default=256)
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--code", type=Path, help="the code task's folder (default: the serving bench's)")
    ap.add_argument("-o", "--output", type=Path, required=True)
    a = ap.parse_args(argv)
    from lookupkit import models
    from lookupkit.bench.suffix_code_task import task_dir
    from lookupkit.integrations.llama_generate import generate
    from lookupkit.integrations.llama_model import open_model
    from lookupkit.bench.serve.tasks import prompts

    path = models.resolve(a.model)
    llm = open_model(path, threads=2)
    tok = lambda s: llm.tokenize(s.encode(), add_bos=True, special=True)  # noqa: E731
    code = a.code or task_dir()
    doc = {"kind": "generations", "model": Path(path).name, "seed": a.seed, "new_tokens": a.n_new, "git": git_state(),
           "machine": machine(), "sequences": []}
    try:
        for task in a.tasks.split(","):
            for i, ids in enumerate(prompts(task, a.prompts, a.seed, tok, llm.token_bos(), code, a.n_new)):
                g = generate(llm, ids, a.n_new, stop_at_eos=True)
                out = g.tokens[:g.eog] if g.eog is not None else g.tokens
                doc["sequences"].append({"task": task, "paragraph": i, "prompt_len": len(ids),
                                         "tokens": [int(t) for t in ids] + [int(t) for t in out]})
            print(f"{task}: {a.prompts} prompts", flush=True)
    finally:
        llm.close()
    write_text(a.output, json.dumps(doc))
    print(f"wrote {a.output}: {len(doc['sequences'])} sequences")


def main(argv=None) -> None:
    entry(run, argv)


if __name__ == "__main__":
    main()
