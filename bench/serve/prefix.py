"""What a cached prompt prefix changes on a quantised model: the same requests through `lookupkit serve`,
each sent with `cache_prompt: false` and again reusing a slot's cache (a retry: all but the last prompt
token reused; a next turn, which re-sends the first answer: the conversation so far reused), texts compared
token by token.

On exact arithmetic they are equal; on Q4_K the KV cells of a reused prefix were computed in other batch
shapes than a fresh decode's, so a greedy text may part from the uncached one. This measures how often
and where, on greedy requests that draft (the flags given) and that do not (--draft 0).

    python -m lookupkit.bench.serve.prefix -m gemma-3-270m --verify-cost CURVE   # -> results/serve-prefix-*.json
"""

from __future__ import annotations

import argparse
import json
import sysconfig
import time
from pathlib import Path

from lookupkit.bench.harness import RESULTS, command, entry, git_state, machine, write_text

N_PROMPTS, N_NEW, PROMPT_CHARS = 12, 128, 1500


def stdlib_prompts(n: int) -> list[str]:
    """The first PROMPT_CHARS characters of n standard-library modules (the same on every machine of one Python)."""
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    step = max(1, len(files) // n)
    return [f.read_text(encoding="utf-8", errors="replace")[:PROMPT_CHARS] for f in files[::step][:n]]


def first_difference(a: list, b: list) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))


def measure(extra: list[str], prompts: list[str], model: Path, threads: int) -> dict:
    import httpx

    from lookupkit.bench.serve.servers import Server, lookupkit_cmd

    pairs = []
    with Server(lambda port: lookupkit_cmd(model, port, threads, 4096, 1, extra)) as server:
        def ask(prompt, cache):
            return httpx.post(f"http://127.0.0.1:{server.port}/completion", timeout=600, json={
                "prompt": prompt, "n_predict": N_NEW, "temperature": 0, "ignore_eos": True, "return_tokens": True,
                "cache_prompt": cache}).json()

        for text in prompts:  # text in, as a client sends it: the next turn re-sends the answer as text
            fresh = ask(text, False)  # the slot now holds the prompt and this answer
            turn = text + fresh["content"] + "\n\n# and then\n"
            turn_cached = ask(turn, True)  # reuses the conversation so far
            retry = ask(text, True)  # reuses the prompt but its last token
            turn_fresh = ask(turn, False)
            for kind, a, b in (("retry", fresh, retry), ("next turn", turn_fresh, turn_cached)):
                pairs.append({"kind": kind, "prompt_tokens": b["tokens_evaluated"], "reused": b["timings"]["cache_n"],
                              "first_difference": first_difference(a["tokens"], b["tokens"])})
    return {"flags": extra, "pairs": pairs, "equal": sum(p["first_difference"] is None for p in pairs),
            "n": len(pairs)}


def run(argv) -> None:
    from lookupkit import models
    from lookupkit.errors import InputError

    args = parse(argv)
    prompts = stdlib_prompts(args.prompts)
    if len(prompts) < args.prompts:
        raise InputError(f"found {len(prompts)} standard-library modules, {args.prompts} prompts asked for")
    model = models.resolve(args.model)
    drafting = ["--policy", "lookupkit", "--draft", str(args.draft)]
    drafting += ["--verify-cost", args.verify_cost] if args.verify_cost else []
    out = {"kind": "serve-prefix", "command": command("lookupkit.bench.serve.prefix", argv), "machine": machine(),
           "git": git_state(), "model": args.model, "n_new": N_NEW, "rows": {}}
    t0 = time.time()
    path = Path(args.out) if args.out else RESULTS / f"serve-prefix-{time.strftime('%Y-%m-%d')}.json"
    for name, extra in (("drafting", drafting), ("plain", ["--draft", "0"])):
        r = out["rows"][name] = measure(extra, prompts, model, args.threads)
        print(f"{name}: {r['equal']} of {r['n']} cached texts equal to the uncached ones", flush=True)
        out["seconds"] = time.time() - t0
        write_text(path, json.dumps(out, indent=1) + "\n")  # after each row: an interrupted run keeps it
    print(f"wrote {path}")


def parse(argv):
    ap = argparse.ArgumentParser(prog="python -m lookupkit.bench.serve.prefix", description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", default="gemma-3-270m")
    ap.add_argument("--verify-cost", help="the drafting row's curve (lookupkit calibrate)")
    ap.add_argument("--draft", type=int, default=16)
    ap.add_argument("--prompts", type=int, default=N_PROMPTS)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-o", "--out", help="results JSON (default: bench/results/serve-prefix-DATE.json)")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    entry(run, argv)


if __name__ == "__main__":
    main()
