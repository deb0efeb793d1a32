"""What both engine adapters need: lazy engine imports with the extra to install, the shared static
cache, and the model's own vocabulary to check the cache against."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
from types import SimpleNamespace

from ..errors import FormatError, InputError, LookupkitError
from ..files import atomic_writer, default_root
from ..tokenizer.gguf import GGUF_MAGIC

REMEMBERED = "vocab-identities.json"  # in the cache directory: GGUF vocabularies already read (gguf_vocab)
REMEMBER_AT_MOST = 32


class MissingExtraError(InputError, ImportError):
    """An engine an adapter needs is not installed (also an ImportError, for code that probes imports)."""


def require(module: str, what: str, extra: str):
    """Import `module`, or fail with one line naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtraError(f"{what} is not installed: pip install 'lookupkit[{extra}]'") from None


def open_static(static):
    """A StaticCache from a path (opened here) or an open one (shared, not copied); None stays None.
    (StaticCache is imported here, not with this module: its module loads numba.)"""
    if static is None:
        return None
    from ..static import StaticCache

    if isinstance(static, StaticCache):
        return static
    if isinstance(static, (str, os.PathLike)):
        return StaticCache.open(static)
    raise InputError(f"static must be a path to a static cache or a StaticCache, got {type(static).__name__}")


def gguf_vocab(model_path) -> SimpleNamespace:
    """A GGUF model's own vocabulary (.name, .fingerprint, for StaticCache.check_vocab); a file that is
    not GGUF is refused. Remembered in the cache directory per file (real path, size, mtime) and per
    version of the code that reads vocabularies: reading and hashing a large vocabulary (Gemma 3's 262,144
    tokens) is a visible delay in every process that checks a cache against the model."""
    check_gguf(model_path)
    st = os.stat(model_path)
    sources = [importlib.util.find_spec(f"lookupkit.tokenizer.{m}").origin for m in ("gguf", "vocab")]  # not imported
    code = [[os.stat(f).st_size, os.stat(f).st_mtime_ns] for f in sources]
    key = json.dumps([os.path.realpath(model_path), st.st_size, st.st_mtime_ns, code])
    store = default_root() / REMEMBERED
    try:
        known = json.loads(store.read_text())
        if not isinstance(known, dict):
            known = {}
    except (OSError, ValueError):
        known = {}
    if isinstance(known.get(key), dict):
        return SimpleNamespace(**known[key])
    identity = vocab_identity(model_path)
    known = {**{k: v for k, v in known.items() if k != key}, key: vars(identity)}
    try:
        store.parent.mkdir(parents=True, exist_ok=True)
        with atomic_writer(store) as f:
            f.write(json.dumps(dict(list(known.items())[-REMEMBER_AT_MOST:])).encode())
    except (OSError, LookupkitError):
        pass  # a cache directory that cannot be written costs the next process a re-read, nothing more
    return identity


def check_gguf(model_path) -> None:
    """Refuse, in one line, a model file that cannot be read or is not GGUF (its first 4 bytes only)."""
    try:
        with open(model_path, "rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise InputError(f"cannot read model {model_path}: {exc.strerror}") from None
    if magic != GGUF_MAGIC:
        raise FormatError(f"{model_path} is not a GGUF model file; llama-cpp-python loads GGUF only "
                          f"(convert it with llama.cpp's convert_hf_to_gguf.py)")


def vocab_identity(path) -> SimpleNamespace:
    """A GGUF's or tokenizer.json's vocabulary as lookup-create records it (.name, .fingerprint)."""
    from ..tokenizer.vocab import fingerprint, load

    v = load(path)
    return SimpleNamespace(name=v.pre if v.model == "gpt2" else "llama-spm", fingerprint=fingerprint(v))


def drafter_factory(model_path, *, static=None, dynamic=None, policy: str = "llama.cpp", policy_table=None,
                    verify_cost=None, history=None):
    """(make_drafter, policy_table) for `generate` and `serve`: make_drafter() is a fresh Drafter over caches
    opened once (a StaticCache, an NgramTable) and the one `history` (a draft.history.History, or None) they
    all share, by the model's shipped policy table unless one is given, at verify_cost (a VerifyCost; None:
    the default constant). One is made now, so a bad table or curve is refused before the model loads, and
    it is the first one handed out."""
    from .. import Drafter
    from ..verify_cost import DEFAULT_COST

    if policy_table is not None and policy != "lookupkit":
        raise InputError("--policy-table is only used with --policy lookupkit")
    if policy == "lookupkit" and policy_table is None:
        from ..policy.confidence import for_model

        policy_table = for_model(model_path)
    cost = DEFAULT_COST if verify_cost is None else verify_cost

    def make():
        return Drafter(static=static, dynamic=dynamic, policy=policy, policy_table=policy_table, verify_cost=cost,
                       history=history)

    spare = [make()]
    return (lambda: spare.pop() if spare else make()), policy_table

