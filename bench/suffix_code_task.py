"""The code task of issue 15: a code base at two releases, the earlier one the static corpus, the later one's
changed and added files the text being written — where a corpus should pay.

    python -m lookupkit.bench.suffix_code_task                       # django 4.2 -> 5.0, texts only
    python -m lookupkit.bench.suffix_code_task -m gemma-3-270m       # + token ids (.npz, a document per file)

Both releases come from the package registry as wheels (`pip download --no-deps --only-binary :all:`: pure
Python, so a wheel holds the very .py files of the release) into --cache (default
$LOOKUPKIT_CACHE_DIR/code-task). Written there: corpus.txt (every .py file of the earlier release), eval.txt
(each .py file of the later release that is new or differs), in path order, each file preceded by a line
`# file: <path>`; with -m, corpus.npz / eval.npz: each file's ids as one document (keys in path order).
Prints one JSON object with the sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np

from lookupkit.bench.harness import entry
from lookupkit.errors import InputError
from lookupkit.files import atomic_writer, default_root

PACKAGE, EARLIER, LATER = "django", "4.2", "5.0"


def code_root() -> Path:
    """Where the code tasks are kept: $LOOKUPKIT_CODE_TASK, else the cache directory's code-task/."""
    return Path(os.environ.get("LOOKUPKIT_CODE_TASK") or default_root() / "code-task")


def task_dir() -> Path:
    """The default task's folder (django 4.2 -> 5.0), where this module writes it and the benches read it."""
    return code_root() / f"{PACKAGE}-{EARLIER}-{LATER}"


def fetch(package: str, version: str, dest: Path) -> Path:
    """The release's wheel in dest, downloaded once."""
    dest.mkdir(parents=True, exist_ok=True)
    found = sorted(p for p in dest.glob("*.whl") if p.name.lower().startswith(f"{package.lower()}-{version}-"))
    if not found:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--quiet",
               "--dest", str(dest), f"{package}=={version}"]
        if subprocess.run(cmd).returncode:
            raise InputError(f"cannot download {package}=={version} (`{' '.join(cmd[2:])}`): it needs the package "
                             "registry, or put the wheel into " + str(dest))
        found = sorted(p for p in dest.glob("*.whl") if p.name.lower().startswith(f"{package.lower()}-{version}-"))
        if not found:
            raise InputError(f"pip downloaded no wheel of {package}=={version} into {dest}")
    return found[0]


def py_files(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as z:
        return {n: z.read(n) for n in sorted(z.namelist()) if n.endswith(".py") and ".dist-info/" not in n}


def joined(files: dict[str, bytes]) -> bytes:
    return b"".join(f"# file: {name}\n".encode() + body + (b"" if body.endswith(b"\n") else b"\n")
                    for name, body in files.items())


def write_ids(files: dict[str, bytes], tok, path: Path) -> int:
    docs = {f"{i:06d}": np.asarray(tok.encode(f"# file: {n}\n" + b.decode("utf-8", "replace"), add_special=False), np.int32)
            for i, (n, b) in enumerate(files.items())}
    with atomic_writer(path) as f:
        np.savez(f, **docs)
    return sum(len(d) for d in docs.values())


def _main(argv) -> None:
    ap = argparse.ArgumentParser(prog="python -m lookupkit.bench.suffix_code_task", description=__doc__.splitlines()[0])
    ap.add_argument("--package", default=PACKAGE)
    ap.add_argument("--earlier", default=EARLIER)
    ap.add_argument("--later", default=LATER)
    ap.add_argument("--cache", default=str(code_root()))
    ap.add_argument("-m", "--model", help="a GGUF vocabulary or a model name lookupkit knows: also write token ids")
    a = ap.parse_args(argv)
    out = Path(a.cache) / f"{a.package}-{a.earlier}-{a.later}"
    out.mkdir(parents=True, exist_ok=True)
    old = py_files(fetch(a.package, a.earlier, Path(a.cache) / "wheels"))
    new = py_files(fetch(a.package, a.later, Path(a.cache) / "wheels"))
    changed = {n: b for n, b in new.items() if old.get(n) != b}
    for name, files in (("corpus.txt", old), ("eval.txt", changed)):
        with atomic_writer(out / name) as f:
            f.write(joined(files))
    res = {"dir": str(out), "corpus_files": len(old), "corpus_bytes": (out / "corpus.txt").stat().st_size,
           "eval_files": len(changed), "eval_added": sum(n not in old for n in changed),
           "eval_bytes": (out / "eval.txt").stat().st_size, "later_files": len(new)}
    if a.model:
        from lookupkit import Tokenizer
        from lookupkit import models

        path = models.resolve(a.model)
        tok = Tokenizer.from_file(path)
        res["corpus_tokens"] = write_ids(old, tok, out / "corpus.npz")
        res["eval_tokens"] = write_ids(changed, tok, out / "eval.npz")
    print(json.dumps(res))


def main(argv=None) -> None:
    entry(_main, argv)


if __name__ == "__main__":
    main()
