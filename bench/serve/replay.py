"""The serving bench's check of `lookupkit replay-requests`: each lookupkit row's served requests and responses
written as the log a user would give it, replayed as the same number of clients sent them (--parallel), and the
predicted decode speed-up set beside the one the row measured over lk:plain."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

from lookupkit.files import atomic_writer
from lookupkit.replay.requests import predicted
from lookupkit.bench.serve.pooling import decode_speed


def replay_row(row: dict, mine: list[dict], plain: list[dict], log_path: Path, model, lkc: Path,
               clients: int = 1) -> dict:
    """The replay of `mine` (records with prompt_ids and tokens, in the order sent) by the row's own flags; measured:
    one client, the decode speed over lk:plain's; several, the aggregate tok/s over lk:plain's at that count (its
    records carry `level_tok_per_s`), prompts included."""
    with atomic_writer(log_path) as f:
        for r in mine:
            f.write((json.dumps({"prompt": r["prompt_ids"], "response": r["tokens"]}) + "\n").encode())
    args = {a: b for a, b in zip(row["args"], row["args"][1:])}
    learn = args.get("--learn", "off")
    cmd = [sys.executable, "-m", "lookupkit", "replay-requests", str(log_path), "-m", str(model),
           "--policy", "lookupkit", "--verify-cost", args["--verify-cost"], "--draft", args["--draft"],
           "--learn", learn, "--parallel", str(clients), "--json"]
    if "-lcs" in args:
        cmd += ["-lcs", str(lkc)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        return {"command": shlex.join(cmd[2:]), "error": (proc.stderr or proc.stdout).strip()[-300:]}
    res = json.loads(proc.stdout)["results"]
    if clients == 1:
        measured = decode_speed(mine) / decode_speed(plain) if plain else None
    else:
        measured = mine[0]["level_tok_per_s"] / plain[0]["level_tok_per_s"] if plain else None
    return {"command": shlex.join(cmd[2:]), "clients": clients, "predicted": predicted(res[learn]),
            "predicted_off": predicted(res["off"]), "measured": measured,
            "drafted_accepted": [res[learn]["drafted"], res[learn]["accepted"]],
            "server_drafted_accepted": [sum(r["drafted"] or 0 for r in mine), sum(r["accepted"] or 0 for r in mine)]}
