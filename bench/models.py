"""Random-weight GGUF models with a real model's shapes, for timing (never for text quality).

`write_qwen2_gguf` writes a qwen2-architecture GGUF with Qwen2.5-0.5B's layer sizes (24 layers, hidden
896, FFN 4864, 14 heads, 2 KV heads, head dim 64, tied output embedding, q/k/v biases) and the
tokenizer.* metadata of a GGUF vocabulary (its size sets the embedding's), so llama.cpp loads and
tokenizes it and caches of that vocabulary apply: qwen2's (../shared/vocab) gives Qwen2.5-0.5B's exact
shapes, the bundled gpt-2 one (the command's default, needs nothing from ../shared) the same layers
with a 50,257-row embedding. Weights are random (seeded), F16 by default, or F32, or Q8_0 (gguf's own
quantize helper). Q8_0 is not the default: llama-cpp-python built with its default flags segfaults on
Q8_0 and Q4_K models on CPUs that report AMX (see .ci/run). Timing a forward pass depends on the shapes
and the weight type, not the values, so the verify-cost curve measured on it is the real model's on
this machine to the extent that matmul speed does not depend on values. Models are cached outside the
repository (never committed):

    python -m lookupkit.bench.models [--type F16|F32|Q8_0] [--vocab VOCAB.gguf] [--out PATH]  # prints the path
"""

from __future__ import annotations

import argparse
import os
from importlib import resources
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from lookupkit.bench.harness import SHARED, bench_dir  # noqa: F401  (bench_dir: imported from here too)
from lookupkit.errors import InputError

QWEN2_VOCAB = SHARED / "vocab" / "ggml-vocab-qwen2.gguf"
BUNDLED_VOCAB = Path(str(resources.files("lookupkit") / "data" / "ggml-vocab-gpt-2.gguf"))
TYPES = ("F16", "F32", "Q8_0")
DEFAULT_TYPE = "F16"


@dataclass(frozen=True)
class Shape:
    n_layer: int = 24
    n_embd: int = 896
    n_ff: int = 4864
    n_head: int = 14
    n_head_kv: int = 2
    head_dim: int = 64
    n_vocab: int | None = None  # None: the vocabulary's own size
    n_ctx: int = 32768
    rope_base: float = 1_000_000.0
    rms_eps: float = 1e-6


QWEN25_05B = Shape()


def default_model_path(qtype: str = DEFAULT_TYPE, vocab: Path = QWEN2_VOCAB, n_layer: int = QWEN25_05B.n_layer) -> Path:
    tag = "" if Path(vocab) == QWEN2_VOCAB else f"{Path(vocab).stem.removeprefix('ggml-vocab-')}-vocab-"
    tag += "" if n_layer == QWEN25_05B.n_layer else f"{n_layer}-layer-"
    return bench_dir() / f"qwen2.5-0.5b-shape-{tag}random-{qtype.lower()}.gguf"


def write_qwen2_gguf(path: Path, shape: Shape = QWEN25_05B, qtype: str = DEFAULT_TYPE, vocab: Path = QWEN2_VOCAB,
                     seed: int = 0, embd_scale: float = 0.2) -> Path:
    """Write the random-weight model (atomically: PATH.tmp, then rename)."""
    import gguf

    if qtype not in TYPES:
        raise InputError(f"weight type must be one of {', '.join(TYPES)}, got {qtype!r}")
    n_vocab = vocab_size(vocab)
    if shape.n_vocab not in (None, n_vocab):
        raise InputError(f"{vocab} has {n_vocab} tokens, the shape {shape.n_vocab}")
    qt = getattr(gguf.GGMLQuantizationType, qtype)
    ftype = {"Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "F16": gguf.LlamaFileType.MOSTLY_F16,
             "F32": gguf.LlamaFileType.ALL_F32}[qtype]
    rng = np.random.default_rng(seed)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    w = gguf.GGUFWriter(str(tmp), "qwen2")
    w.add_name("lookupkit-random-qwen2.5-0.5b-shape")
    w.add_context_length(shape.n_ctx)
    w.add_embedding_length(shape.n_embd)
    w.add_block_count(shape.n_layer)
    w.add_feed_forward_length(shape.n_ff)
    w.add_head_count(shape.n_head)
    w.add_head_count_kv(shape.n_head_kv)
    w.add_rope_freq_base(shape.rope_base)
    w.add_layer_norm_rms_eps(shape.rms_eps)
    w.add_file_type(ftype)
    reader = gguf.GGUFReader(vocab)
    for key, field in reader.fields.items():
        if key.startswith("tokenizer."):
            sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
            w.add_key_value(key, field.contents(), field.types[0], sub)

    def matrix(rows, cols, scale=None):
        a = (rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(scale or cols ** -0.5))
        if qt == gguf.GGMLQuantizationType.F32:
            return a, None
        if qt == gguf.GGMLQuantizationType.F16:
            return a.astype(np.float16), None
        return gguf.quants.quantize(a, qt), qt

    def add(name, arr_qt):
        arr, q = arr_qt
        w.add_tensor(name, arr, raw_dtype=q)

    def vec(n, value=None):
        return (np.full(n, value, np.float32) if value is not None
                else (rng.standard_normal(n, dtype=np.float32) * np.float32(0.02))), None

    d, kv = shape.n_embd, shape.head_dim * shape.n_head_kv
    add("token_embd.weight", matrix(n_vocab, d, embd_scale))  # tied: no output.weight
    add("output_norm.weight", vec(d, 1.0))
    for i in range(shape.n_layer):
        b = f"blk.{i}."
        add(b + "attn_norm.weight", vec(d, 1.0))
        add(b + "attn_q.weight", matrix(shape.head_dim * shape.n_head, d))
        add(b + "attn_q.bias", vec(shape.head_dim * shape.n_head))
        add(b + "attn_k.weight", matrix(kv, d))
        add(b + "attn_k.bias", vec(kv))
        add(b + "attn_v.weight", matrix(kv, d))
        add(b + "attn_v.bias", vec(kv))
        add(b + "attn_output.weight", matrix(d, shape.head_dim * shape.n_head))
        add(b + "ffn_norm.weight", vec(d, 1.0))
        add(b + "ffn_gate.weight", matrix(shape.n_ff, d))
        add(b + "ffn_up.weight", matrix(shape.n_ff, d))
        add(b + "ffn_down.weight", matrix(d, shape.n_ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, path)
    return path


def vocab_size(vocab: Path) -> int:
    """Tokens in a GGUF vocabulary (a missing file is one line naming --vocab)."""
    import gguf

    if not Path(vocab).is_file():
        raise InputError(f"vocabulary {vocab} does not exist (give another with --vocab, e.g. {BUNDLED_VOCAB})")
    return len(gguf.GGUFReader(vocab).fields["tokenizer.ggml.tokens"].data)


def ensure_model(qtype: str = DEFAULT_TYPE, path: Path | None = None, log=print, vocab: Path = QWEN2_VOCAB,
                 shape: Shape = QWEN25_05B) -> Path:
    """The cached model, written first if absent (~20 s and ~1.5 GB of RAM for the full shape)."""
    path = Path(path or default_model_path(qtype, vocab, shape.n_layer))
    if not path.exists():
        vocab_size(vocab)
        log(f"writing a random-weight Qwen2.5-0.5B-shaped {qtype} GGUF with the vocabulary of {vocab} to {path} "
            f"(once) ...")
        write_qwen2_gguf(path, shape=shape, qtype=qtype, vocab=vocab)
    return path


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m lookupkit.bench.models")
    p.add_argument("--type", choices=TYPES, default=DEFAULT_TYPE,
                   help=f"weight type (default {DEFAULT_TYPE}; Q8_0 crashes llama-cpp-python builds with AMX kernels)")
    p.add_argument("--vocab", type=Path, default=BUNDLED_VOCAB,
                   help="GGUF vocabulary (default: the bundled gpt-2; ../shared/vocab/ggml-vocab-qwen2.gguf gives "
                        "Qwen2.5-0.5B's exact embedding)")
    p.add_argument("--n-layer", type=int, default=QWEN25_05B.n_layer, help="layers (default Qwen2.5-0.5B's 24)")
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    if a.n_layer < 1:
        p.error(f"--n-layer must be at least 1, got {a.n_layer}")
    shape = replace(QWEN25_05B, n_layer=a.n_layer)
    try:
        print(ensure_model(a.type, a.out, vocab=a.vocab, shape=shape, log=lambda m: print(m, file=sys.stderr)))
    except InputError as exc:
        p.exit(2, f"error: {exc}\n")
    print(asdict(replace(shape, n_vocab=vocab_size(a.vocab))))


if __name__ == "__main__":
    main()
