"""Random-weight GGUF models with a real model's shapes, for timing (never for text quality).

`write_qwen2_gguf` writes a qwen2-architecture GGUF with Qwen2.5-0.5B's layer sizes (24 layers, hidden
896, FFN 4864, 14 heads, 2 KV heads, head dim 64, tied output embedding, q/k/v biases) and the
tokenizer.* metadata of a qwen2 GGUF vocabulary, so llama.cpp loads and tokenizes it and lookupkit's
qwen2 caches apply. Weights are random (seeded), quantized to Q8_0 with gguf's own quantize helper
(or F16). Timing a forward pass depends on the shapes and the weight type, not the values, so the
verify-cost curve measured on it is the real model's on this machine to the extent that matmul speed
does not depend on values. Models are cached outside the repository (never committed):

    python -m lookupkit.bench.models [--type Q8_0|F16] [--out PATH]    # prints the path
"""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

QWEN2_VOCAB = Path(__file__).resolve().parents[1].parent / "shared" / "vocab" / "ggml-vocab-qwen2.gguf"


@dataclass(frozen=True)
class Shape:
    n_layer: int = 24
    n_embd: int = 896
    n_ff: int = 4864
    n_head: int = 14
    n_head_kv: int = 2
    head_dim: int = 64
    n_vocab: int = 151936
    n_ctx: int = 32768
    rope_base: float = 1_000_000.0
    rms_eps: float = 1e-6


QWEN25_05B = Shape()


def bench_dir() -> Path:
    root = os.environ.get("LOOKUPKIT_CACHE_DIR")
    return (Path(root) if root else Path.home() / ".cache" / "lookupkit") / "bench"


def default_model_path(qtype: str = "Q8_0") -> Path:
    return bench_dir() / f"qwen2.5-0.5b-shape-random-{qtype.lower()}.gguf"


def write_qwen2_gguf(path: Path, shape: Shape = QWEN25_05B, qtype: str = "Q8_0", vocab: Path = QWEN2_VOCAB,
                     seed: int = 0, embd_scale: float = 0.2) -> Path:
    """Write the random-weight model (atomically: PATH.tmp, then rename)."""
    import gguf

    qt = {"Q8_0": gguf.GGMLQuantizationType.Q8_0, "F16": gguf.GGMLQuantizationType.F16}[qtype]
    ftype = {"Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "F16": gguf.LlamaFileType.MOSTLY_F16}[qtype]
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
    n_tokens = len(reader.fields["tokenizer.ggml.tokens"].data)
    if n_tokens != shape.n_vocab:
        raise ValueError(f"{vocab} has {n_tokens} tokens, the shape {shape.n_vocab}")
    for key, field in reader.fields.items():
        if key.startswith("tokenizer."):
            sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
            w.add_key_value(key, field.contents(), field.types[0], sub)

    def matrix(rows, cols, scale=None):
        a = (rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(scale or cols ** -0.5))
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
    add("token_embd.weight", matrix(shape.n_vocab, d, embd_scale))  # tied: no output.weight
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


def ensure_model(qtype: str = "Q8_0", path: Path | None = None, log=print) -> Path:
    """The cached model, written first if absent (~20 s and ~1.5 GB of RAM for Q8_0)."""
    path = Path(path or default_model_path(qtype))
    if not path.exists():
        log(f"writing a random-weight Qwen2.5-0.5B-shaped {qtype} GGUF to {path} (once) ...")
        write_qwen2_gguf(path, qtype=qtype)
    return path


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m lookupkit.bench.models")
    p.add_argument("--type", choices=["Q8_0", "F16"], default="Q8_0")
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    print(ensure_model(a.type, a.out))
    print(asdict(QWEN25_05B))


if __name__ == "__main__":
    main()
