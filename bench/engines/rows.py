"""The rows of the engines bench: which engine, which drafting, which static cache, and the commands
that build the caches. A row is a dict (name, engine, kind, cache, n_draft, ... and, for lookupkit rows,
a factory of a fresh Drafter / LookupGenerate per generation, so no row learns from another prompt).
"""

from __future__ import annotations

from pathlib import Path

# label -> file in --caches: 25/100/541 MB of wiki541.txt.zst (lookup-create --max-bytes), and the 541 MB
# corpus with orders 2-6 (--orders 2-6; only the policy reads the higher orders: llama.cpp's rule drafts
# from the 2-gram static cache alone, so it has no row of its own)
CACHES = {"25MB": ("gemma-wiki25.lkc", "--max-bytes 25MB"), "100MB": ("gemma-wiki100.lkc", "--max-bytes 100MB"),
          "541MB": ("gemma-wiki541.lkc", ""), "541MB-o6": ("gemma-wiki541-o6.lkc", "--orders 2-6")}


def cache_command(label: str) -> str:
    """The lookup-create command that builds a cache of CACHES (from ../shared/corpora/wiki541.txt.zst)."""
    file, extra = CACHES[label]
    return " ".join(x for x in ("lookup-create -m gemma-3-270m-q4_k_m.gguf -f wiki541.txt.zst -j 1", extra,
                                f"-lcs {file}") if x)


SERVER_LCS = "25MB"  # the ngram-cache row's static cache (as in issue 13's first run)


def server_rows(lcs: Path | None) -> list[dict]:
    rows = [{"name": "server:none", "engine": "llama-server", "plain": True, "args": []},
            {"name": "server:none-b32", "engine": "llama-server", "floor": True, "args": ["-b", "32", "-ub", "32"]}]
    if lcs is not None:
        rows.append({"name": "server:ngram-cache", "engine": "llama-server", "lcs": str(lcs),
                     "args": ["--spec-type", "ngram-cache", "-lcs", str(lcs)]})
    rows += [{"name": f"server:{t}", "engine": "llama-server", "args": ["--spec-type", t]}
             for t in ("ngram-mod", "ngram-simple")]
    return rows


def lcpp_rows(caches: dict, cost, policy_drafts, policy_n: int, rule_n: int, policy_table=None) -> list[dict]:
    from lookupkit import Drafter

    def drafter(static, policy):
        if policy == "lookupkit":
            return lambda: Drafter(static=static, policy="lookupkit", verify_cost=cost, policy_table=policy_table)
        return lambda: Drafter(static=static)

    rows = [{"name": "lcpp:plain", "engine": "llama-cpp-python", "kind": "plain", "plain": True},
            {"name": "lcpp:plain-b32", "engine": "llama-cpp-python", "kind": "plain-b32", "floor": True},
            {"name": "lcpp:pld8", "engine": "llama-cpp-python", "kind": "pld", "n_draft": 8}]
    labels = ["ctx", *[c for c in CACHES if c in caches]]
    for c in labels:
        if rule_cache(c) == c:
            rows.append({"name": f"lk:rule-{c}", "engine": "llama-cpp-python", "kind": "lookupkit",
                         "policy": "llama.cpp", "cache": c, "n_draft": rule_n, "drafter": drafter(caches.get(c), "llama.cpp")})
    for c in labels:
        rows.append({"name": f"lk:policy-{c}-n{policy_n}", "engine": "llama-cpp-python", "kind": "lookupkit",
                     "policy": "lookupkit", "cache": c, "rule_row": f"lk:rule-{rule_cache(c)}", "n_draft": policy_n,
                     "drafter": drafter(caches.get(c), "lookupkit")})
    for n in policy_drafts:
        if n != policy_n:
            rows.append({"name": f"lk:policy-{labels[-1]}-n{n}", "engine": "llama-cpp-python", "kind": "lookupkit",
                         "policy": "lookupkit", "cache": labels[-1], "rule_row": f"lk:rule-{rule_cache(labels[-1])}",
                         "n_draft": n, "drafter": drafter(caches.get(labels[-1]), "lookupkit")})
    return rows


def rule_cache(label: str) -> str:
    """The cache llama.cpp's rule drafts the same from (it reads 2-grams only): 541MB-o6 -> 541MB."""
    return label.split("-o")[0]


def hf_rows(caches: dict, hf_cost: float, policy_n: int, rule_n: int) -> list[dict]:
    from lookupkit.integrations.transformers import LookupGenerate

    c = SERVER_LCS if SERVER_LCS in caches else next(iter(caches), "ctx")
    static = caches.get(c)
    return [{"name": "hf:plain", "engine": "transformers", "kind": "plain", "plain": True},
            {"name": "hf:pld8", "engine": "transformers", "kind": "pld", "n_draft": 8},
            {"name": f"hf:lk-rule-{c}", "engine": "transformers", "kind": "lookupkit",
             "policy": "llama.cpp", "cache": c, "n_draft": rule_n,
             "generator": lambda: LookupGenerate(static=static, n_draft=rule_n)},
            {"name": f"hf:lk-policy-{c}-n{policy_n}", "engine": "transformers", "kind": "lookupkit",
             "policy": "lookupkit", "cache": c, "n_draft": policy_n, "verify_cost": hf_cost,
             "generator": lambda: LookupGenerate(static=static, n_draft=policy_n, policy="lookupkit",
                                                 verify_cost=hf_cost)}]


def public(row: dict) -> dict:
    """A row's description as the results JSON keeps it (no callables)."""
    return {k: v for k, v in row.items() if not callable(v)}
