"""What both engine adapters need: lazy engine imports with the extra to install, the shared static
cache, and the model's own vocabulary to check the cache against."""

from __future__ import annotations

import importlib
import os
from types import SimpleNamespace

from ..errors import FormatError, InputError
from ..tokenizer.gguf import GGUF_MAGIC
from ..tokenizer.vocab import fingerprint, load


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
    not GGUF is refused."""
    check_gguf(model_path)
    return vocab_identity(model_path)


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
    v = load(path)
    return SimpleNamespace(name=v.pre if v.model == "gpt2" else "llama-spm", fingerprint=fingerprint(v))
