"""Read a vocabulary (GGUF `tokenizer.ggml.*` or HF tokenizer.json) into the facts that decide its ids.

`load` returns a `Vocab`: tokens, types, merges or scores, BOS/EOS and their add_* flags with
llama.cpp's per-model defaults, and the pre-tokenizer regexes; `fingerprint` names exactly that
content, so caches record which ids they hold. How the ids are then produced is `tokenizer`'s job.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import regex

from . import backends as bb
from ..errors import FormatError
from ..files import open_input
from .gguf import GGUF_MAGIC, read_metadata

class UnsupportedVocab(FormatError):
    """A valid vocabulary whose tokenizer lookupkit does not reproduce (llama.cpp's may: fallback)."""


NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# FIM markers, forced to control only when the GGUF does not name that FIM token (llama.cpp picks
# one candidate per kind in hash order; marking all of them differs only for vocabularies with two).
FIM_TEXTS = {
    ("fim_pre", "prefix"): {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\uff5cfim\u2581begin\uff5c>",
                            "<PRE>", "\u2581<PRE>", "<|code_prefix|>", "<|prefix|>"},
    ("fim_suf", "suffix"): {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\uff5cfim\u2581hole\uff5c>",
                            "<SUF>", "\u2581<SUF>", "<|code_suffix|>", "<|suffix|>"},
    ("fim_mid", "middle"): {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\uff5cfim\u2581end\uff5c>",
                            "<MID>", "\u2581<MID>", "<|code_middle|>", "<|middle|>"},
    ("fim_pad", None): {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"},
    ("fim_rep", None): {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"},
    ("fim_sep", None): {"<|file_sep|>"},
}


@dataclass
class Vocab:
    """What decides llama.cpp's ids for a vocabulary, whichever file it came from."""

    model: str                  # "gpt2" (byte-level BPE) or "llama" (SentencePiece)
    pre: str
    tokens: list
    types: list
    merges: list | None
    scores: object | None
    bos_id: int | None
    eos_id: int | None
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool
    regexes: list | None = None
    ignore_merges: bool = False
    fim_named: set = field(default_factory=set)  # FIM kinds whose id the file names
    strip: dict = field(default_factory=dict)    # id -> (lstrip, rstrip), llama.cpp's per-model attributes
    unsupported: str | None = None               # why lookupkit cannot encode it (load(strict=False))


def load(path, strict: bool = True) -> Vocab:
    """A GGUF vocabulary (tokenizer.ggml.*) or a HF tokenizer.json (byte-level BPE), by content.

    An unsupported tokenizer model or pre-tokenizer raises UnsupportedVocab, or with strict=False
    is returned with `unsupported` saying why (its facts still fingerprint it). A name that
    `lookupkit model --list` knows (gemma-3-270m) and that is no file here is that model's GGUF."""
    p = Path(path)
    if not p.exists():
        from .. import models

        p = models.resolve(path) if str(path) in models.MODELS else p
    with open_input(p, "vocabulary") as f:
        head = f.read(64)
    if head[:4] == GGUF_MAGIC:
        v = _vocab_from_gguf(p)
        if strict and v.unsupported:
            raise UnsupportedVocab(f"{p}: {v.unsupported}")
        return v
    if head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"{":
        return _vocab_from_hf_json(p)
    raise FormatError(f"{p}: neither a GGUF file nor a HF tokenizer.json")


def fingerprint(v: Vocab) -> str:
    """sha256 of everything that decides the ids, independent of file path and container."""
    h = hashlib.sha256(b"lookupkit-vocab-1\0")
    head = [v.model, v.pre, len(v.tokens), v.bos_id, v.eos_id, v.add_bos, v.add_eos,
            v.add_space_prefix, v.ignore_merges, v.regexes]
    if v.strip:  # only where llama.cpp sets them, so other fingerprints stay as they were
        head.append(sorted([i, *f] for i, f in v.strip.items()))
    h.update(json.dumps(head).encode())
    for strings in (v.tokens, v.merges or []):
        enc = [s.encode("utf-8", "surrogateescape") for s in strings]
        h.update(np.array([len(e) for e in enc], "<u4").tobytes())
        h.update(b"".join(enc))
    h.update(np.asarray(v.types, "<i4").tobytes())
    if v.scores is not None:
        h.update(np.asarray(v.scores, "<f4").tobytes())
    return h.hexdigest()


def _vocab_from_gguf(path: Path) -> Vocab:
    md = read_metadata(path, ("tokenizer.ggml.", "general.name", "general.architecture"))

    def get(key, kind, default=None):
        val = md.get("tokenizer.ggml." + key, default)
        if val is not None and not isinstance(val, kind):
            raise FormatError(f"{path}: tokenizer.ggml.{key} has the wrong type")
        return val

    model = get("model", str)
    tokens = get("tokens", list)
    if model is None or tokens is None:
        raise FormatError(f"{path}: GGUF file has no tokenizer (tokenizer.ggml.model/tokens missing)")
    n = len(tokens)
    tokens = _unique_tokens([t or f"[EMPTY_{i}]" for i, t in enumerate(tokens)], path)
    types = get("token_type", array, array("i", [NORMAL] * n))
    if types.typecode not in "bBhHiIlLqQ" or len(types) < n:
        raise FormatError(f"{path}: tokenizer.ggml.token_type does not give an integer type per token")
    v = Vocab(model=model, pre=get("pre", str, "default"), tokens=tokens, types=list(types[:n]),
               merges=None, scores=None, bos_id=None, eos_id=None, add_bos=False, add_eos=False,
               add_space_prefix=False)
    default_bos, default_eos = None, None
    if model == "gpt2":
        pre = bb.PRE_ALIASES.get(v.pre, v.pre)
        if pre in bb.PRE_TOKENIZERS:
            v.regexes, v.ignore_merges, v.add_bos = bb.PRE_TOKENIZERS[pre]
            v.regexes = list(v.regexes)
        else:
            v.unsupported = f"unsupported pre-tokenizer {v.pre!r} (BPE vocabulary)"
        v.merges = get("merges", list)
        if v.merges is None or not all(isinstance(m, str) for m in v.merges):
            raise FormatError(f"{path}: BPE vocabulary without string tokenizer.ggml.merges")
        default_bos = default_eos = 11  # llama.cpp's defaults for BPE
    elif model == "llama":
        v.scores = get("scores", array)
        if v.scores is None or v.scores.typecode not in "fi" or len(v.scores) < n:
            raise FormatError(f"{path}: SentencePiece vocabulary without enough tokenizer.ggml.scores")
        v.scores = list(v.scores[:n])
        v.add_bos, v.add_space_prefix = True, True
        default_bos, default_eos = 1, 2
    else:
        v.unsupported = f"unsupported tokenizer model {model!r} (lookupkit encodes gpt2 BPE and llama SentencePiece)"

    def token_id(key, default):
        val = md.get(f"tokenizer.ggml.{key}_token_id")
        ok = isinstance(val, int) and not isinstance(val, bool) and 0 <= val < n
        return val if ok else (default if default is not None and default < n else None)

    v.bos_id, v.eos_id = token_id("bos", default_bos), token_id("eos", default_eos)
    v.add_bos = bool(md.get("tokenizer.ggml.add_bos_token", v.add_bos))
    v.add_eos = bool(md.get("tokenizer.ggml.add_eos_token", v.add_eos))
    v.add_space_prefix = bool(md.get("tokenizer.ggml.add_space_prefix", v.add_space_prefix))
    v.fim_named = {k for k, old in FIM_TEXTS if token_id(k, None) is not None
                   or (old and token_id(old, None) is not None)}
    if not v.unsupported:
        _check_special_ids(v, path)
    v.strip = _strip_attributes(v, md)
    return v


def _strip_attributes(v: Vocab, md: dict) -> dict:
    """llama.cpp's per-model lstrip/rstrip token attributes, chosen by model, pre-tokenizer or
    architecture name (llama-vocab.cpp, "Handle per token attributes")."""
    name = str(md.get("general.name", "")).lower()
    arch, pre = str(md.get("general.architecture", "")), v.pre
    ids = {t: i for i, t in enumerate(v.tokens)}
    if any(k in pre for k in ("jina-v2-de", "jina-v2-es", "jina-v2-code", "mmbert")) or \
            any(k in arch for k in ("nomic-bert-moe", "jina-bert-v3")):
        return {ids["<mask>"]: (True, False)} if "<mask>" in ids else {}
    if "phi-3" in name or "phi3" in name:
        out = {i: (False, True) for i, ty in enumerate(v.types) if ty in (CONTROL, USER_DEFINED, UNKNOWN)}
        if "</s>" in ids:
            out[ids["</s>"]] = (False, True)
        for t in ("<unk>", "<s>", "<|endoftext|>"):
            out.pop(ids.get(t), None)
        return out
    if "modern-bert" in name and "[MASK]" in ids:
        return {ids["[MASK]"]: (True, False)}
    return {}


def _unique_tokens(tokens: list, path) -> list:
    if not all(isinstance(t, str) for t in tokens):
        raise FormatError(f"{path}: the token list does not hold strings")
    if len(set(tokens)) != len(tokens):
        raise FormatError(f"{path}: duplicate tokens in the vocabulary (llama.cpp refuses them too)")
    return tokens


def _check_special_ids(v: Vocab, path) -> None:
    if v.add_bos and v.bos_id is None:
        raise FormatError(f"{path}: add_bos_token is true but the vocabulary has no BOS token")
    if v.add_eos and v.eos_id is None:
        raise FormatError(f"{path}: add_eos_token is true but the vocabulary has no EOS token")


def _vocab_from_hf_json(path: Path) -> Vocab:
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
        return _parse_hf_json(data, path)
    except (ValueError, KeyError, TypeError, AttributeError, IndexError):
        raise FormatError(f"{path}: not a valid HF tokenizer.json") from None


def _parse_hf_json(data: dict, path: Path) -> Vocab:
    model = data["model"]
    if model.get("type") != "BPE":
        raise FormatError(f"{path}: unsupported tokenizer.json model {model.get('type')!r} (need BPE)")
    added = {int(a["id"]): a for a in data.get("added_tokens") or []}
    ids = {**{int(i): t for t, i in model["vocab"].items()}, **{i: a["content"] for i, a in added.items()}}
    n = max(ids) + 1 if ids else 0
    if n > 2 * len(ids) + 1024 or min(ids, default=0) < 0:
        raise FormatError(f"{path}: token ids of the tokenizer.json are not dense")
    tokens = _unique_tokens([ids.get(i) or f"[EMPTY_{i}]" for i in range(n)], path)
    types = [(CONTROL if added[i].get("special") else USER_DEFINED) if i in added else NORMAL
             for i in range(n)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]
    regexes = _hf_regexes(data.get("pre_tokenizer"), path)
    pre = next((k for k, (r, _, _) in bb.PRE_TOKENIZERS.items() if r == regexes), "custom")
    bos = _hf_bos(data.get("post_processor"), {t: i for i, t in enumerate(tokens)})
    return Vocab(model="gpt2", pre=pre, tokens=tokens, types=types, merges=merges, scores=None,
                  bos_id=bos, eos_id=None, add_bos=bos is not None, add_eos=False,
                  add_space_prefix=False, regexes=regexes, ignore_merges=bool(model.get("ignore_merges")))


def _hf_regexes(pt, path) -> list:
    """The llama.cpp-style regex list of a byte-level HF pre-tokenizer (Split/ByteLevel/Digits)."""
    steps = (pt or {}).get("pretokenizers", [pt]) if (pt or {}).get("type") == "Sequence" else [pt]
    out, byte_level = [], False
    for st in steps:
        kind = (st or {}).get("type")
        if kind == "Split" and st.get("behavior") == "Isolated" and not st.get("invert"):
            pat = st["pattern"]
            r = pat.get("Regex") if "Regex" in pat else regex.escape(pat.get("String", ""))
            out.append(r.replace("(?i:'s|'t|'re|'ve|'m|'ll|'d)",
                                 "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"))
        elif kind == "ByteLevel" and not st.get("add_prefix_space"):
            byte_level = True
            if st.get("use_regex", True):
                out.append(bb.PRE_TOKENIZERS["gpt-2"][0][0])
        elif kind == "Digits":
            out.append(r"\p{N}" if st.get("individual_digits") else r"\p{N}+")
        else:
            raise FormatError(f"{path}: unsupported tokenizer.json pre-tokenizer {kind!r}")
    if not byte_level or not out:
        raise FormatError(f"{path}: only byte-level BPE tokenizer.json files are supported")
    return out


def _hf_bos(pp, ids: dict) -> int | None:
    """BOS id if the post-processor template starts with a special token (as Llama 3's does)."""
    procs = (pp or {}).get("processors", [pp]) if (pp or {}).get("type") == "Sequence" else [pp]
    for p in procs:
        if (p or {}).get("type") == "TemplateProcessing" and p.get("single"):
            first = p["single"][0]
            if "SpecialToken" in first:
                return ids.get(first["SpecialToken"]["id"])
    return None
