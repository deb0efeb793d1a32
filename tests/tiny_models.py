"""Tiny random-weight models built on the spot, so the engine tests download nothing.

A llama-architecture GGUF for llama-cpp-python and a Qwen2ForCausalLM for transformers, both over the
bundled GPT-2 vocabulary (the GGUF carries its tokenizer.* metadata verbatim, so llama.cpp can load and
tokenize it and lookupkit computes the same vocab fingerprint), plus static caches built from text with
lookupkit's own tokenizer. Random weights fall into repetitive text quickly: drafts hit, which is what
the tests need. Import the fixtures into a test module to use them (there is no conftest.py).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np
import pytest

VOCAB = Path(str(resources.files("lookupkit") / "data" / "ggml-vocab-gpt-2.gguf"))
README = Path(__file__).resolve().parents[1] / "README.md"
N_VOCAB = 50257  # the bundled GPT-2 vocabulary


def write_llama_gguf(path: Path, *, n_layer: int = 2, n_embd: int = 64, n_head: int = 4, n_head_kv: int = 2,
                     n_ff: int = 128, n_ctx: int = 2048, embd_scale: float = 0.2, seed: int = 0,
                     vocab: Path = VOCAB, chat_template: str | None = None) -> Path:
    """A random-weight llama model (F32, tied output embedding) with `vocab`'s tokenizer.* metadata (and
    `chat_template` as its tokenizer.chat_template, if given).

    With the output tied to the embedding, greedy text repeats a token for a while, then moves on:
    drafts are accepted in runs and rejected at the switches, both of which the tests need."""
    import gguf

    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("lookupkit-tiny-llama")
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    reader = gguf.GGUFReader(vocab)
    for key, field in reader.fields.items():
        if key.startswith("tokenizer."):
            sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
            w.add_key_value(key, field.contents(), field.types[0], sub)
    if chat_template is not None:
        w.add_chat_template(chat_template)

    def rand(*shape, scale=None):
        return (rng.standard_normal(shape) * (scale or shape[-1] ** -0.5)).astype(np.float32)

    kv = n_embd // n_head * n_head_kv
    w.add_tensor("token_embd.weight", rand(N_VOCAB, n_embd, scale=embd_scale))
    w.add_tensor("output_norm.weight", np.ones(n_embd, np.float32))
    for i in range(n_layer):
        for name, arr in (("attn_norm", np.ones(n_embd, np.float32)), ("attn_q", rand(n_embd, n_embd)),
                          ("attn_k", rand(kv, n_embd)), ("attn_v", rand(kv, n_embd)),
                          ("attn_output", rand(n_embd, n_embd)), ("ffn_norm", np.ones(n_embd, np.float32)),
                          ("ffn_gate", rand(n_ff, n_embd)), ("ffn_up", rand(n_ff, n_embd)),
                          ("ffn_down", rand(n_embd, n_ff))):
            w.add_tensor(f"blk.{i}.{name}.weight", arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def qwen2_model(seed: int = 0, n_layer: int = 2, hidden: int = 64):
    """A random Qwen2ForCausalLM over the GPT-2 ids, in eval mode (greedy generation is deterministic).

    Weights larger than the default init (0.02) let the layers move the text on instead of echoing
    the last token: greedy text then repeats for a while and moves on, as the GGUF's does."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=N_VOCAB, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=n_layer, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=2048, tie_word_embeddings=True, initializer_range=0.125,
                         bos_token_id=50256, eos_token_id=50256, pad_token_id=50256)
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        model.model.embed_tokens.weight.normal_(0.0, 0.2)
    model.generation_config.pad_token_id = 50256
    return model


def static_from_text(text: str, path: Path) -> Path:
    """A static .lkc built with lookupkit's pipeline from `text` (bundled GPT-2 vocabulary)."""
    from lookupkit import Tokenizer
    from lookupkit.create import build_static
    from lookupkit.corpora import TextFile

    src = path.with_suffix(".txt")
    src.write_text(text, encoding="utf-8")
    build_static([TextFile(src)], Tokenizer.default(), path, token_cache=False)
    return path


def foreign_static(path: Path) -> Path:
    """A valid .lkc that records another vocabulary (name "qwen2", another fingerprint)."""
    from lookupkit import StaticCache
    from lookupkit.formats import write_table

    with StaticCache.open(static_from_text("a b c a b d a b c\n", path.with_name("own.lkc"))) as own:
        table = own.to_table()
    write_table(table, path, "lkc", {"vocab": {"name": "qwen2", "n_vocab": 151936, "fingerprint": "f" * 64}})
    return path


def learnt(tokens):
    """The dynamic cache a Drafter holds after learning one finished sequence."""
    from lookupkit import Drafter

    drafter = Drafter()
    drafter.reset(np.asarray(tokens, dtype=np.int32))
    return drafter.dynamic_table()


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory) -> Path:
    return write_llama_gguf(tmp_path_factory.mktemp("models") / "tiny-llama.gguf")



def in_threads(fn, n: int) -> list:
    """[fn(0), ..., fn(n - 1)], each call in its own thread, all running at once."""
    import threading

    results: dict[int, object] = {}
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, fn(i))) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [results[i] for i in range(n)]
