"""A Tokenizer whose ids come from llama.cpp itself, through llama-cpp-python (vocab_only=True).

For vocabularies lookupkit does not encode natively (WPM/BERT, UGM/T5, RWKV, PLaMo-2, gemma4 BPE,
pre-tokenizers it does not know): the ids are llama.cpp's by construction, so never wrong, but
every text is encoded whole (llama.cpp's tokenizers are not analysed for safe cuts here, so a
build streams nothing and runs on one core) and at llama.cpp's speed. `llama_tokenize` is called
once per text with a buffer sized for the worst case (llama-cpp-python's own `tokenize` calls it
twice when the text is longer than the training context). `seconds`/`n_bytes` let the caller say
how fast it went. Any GGUF works, with or without weights: only the vocabulary is loaded.
"""

from __future__ import annotations

import atexit
import ctypes
import time
from pathlib import Path

import numpy as np

from typing import Iterable, Iterator

from ..errors import InputError
from .vocab import Vocab, fingerprint

INSTALL = "pip install 'lookupkit[llama]'"


class LlamaCppTokenizer:
    """`Tokenizer`'s interface over llama.cpp's `llama_tokenize` (whole texts only, never cut)."""

    engine = "llama-cpp-python"

    def __init__(self, path, vocab: Vocab, reason: str):
        try:
            import llama_cpp
        except ImportError:
            raise InputError(f"{reason}; and llama-cpp-python, which could encode it, is not installed ({INSTALL})") from None
        self._lib, self._v = llama_cpp, vocab
        self.reason = vocab.unsupported or reason.split(": ", 1)[-1]  # what lookupkit cannot encode
        self._llm = llama_cpp.Llama(model_path=str(Path(path)), vocab_only=True, verbose=False)
        atexit.register(self._llm.close)  # before interpreter teardown, where its __del__ fails noisily
        self._vocab = llama_cpp.llama_model_get_vocab(self._llm.model)
        self.name = f"llama.cpp {vocab.model}" + (f"/{vocab.pre}" if vocab.pre != "default" else "")
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)
        bos, eos = llama_cpp.llama_vocab_bos(self._vocab), llama_cpp.llama_vocab_eos(self._vocab)
        self.bos_id, self.eos_id = (bos if bos >= 0 else None), (eos if eos >= 0 else None)
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self._vocab))
        self.add_eos = bool(llama_cpp.llama_vocab_get_add_eos(self._vocab))
        self.fingerprint = fingerprint(vocab)
        self.version = getattr(llama_cpp, "__version__", "?")
        self.bundled = False
        self.seconds, self.n_bytes = 0.0, 0

    @property
    def cuttable(self) -> bool:
        return False

    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> np.ndarray:
        return self._segment(text, add_special, add_special, parse_special)

    def encode_chunks(self, chunks: Iterable[str], add_special: bool = True,
                      parse_special: bool = True) -> Iterator[np.ndarray]:
        yield self.encode("".join(chunks), add_special, parse_special)

    def encode_segment(self, text: str, first: bool, last: bool, add_special: bool = True,
                       parse_special: bool = True) -> np.ndarray:
        if not (first and last):
            raise InputError("a llama.cpp-encoded vocabulary is tokenized as whole texts only")
        return self._segment(text, add_special, add_special, parse_special)

    def _segment(self, text: str, bos: bool, eos: bool, parse_special: bool, at_start: bool = True) -> np.ndarray:
        # llama.cpp's add_special adds BOS, EOS, SEP as the vocabulary says; callers only ask for
        # both or neither since this tokenizer is never cut
        data = text.encode("utf-8")
        start = time.perf_counter()
        ids = self._tokenize(data, bos or eos, parse_special)
        self.seconds += time.perf_counter() - start
        self.n_bytes += len(data)
        return ids

    def _tokenize(self, data: bytes, add_special: bool, parse_special: bool) -> np.ndarray:
        n = len(data) + 16
        for _ in range(2):
            buf = np.empty(n, np.int32)
            got = self._lib.llama_tokenize(self._vocab, data, len(data),
                                           buf.ctypes.data_as(ctypes.POINTER(self._lib.llama_token)), n,
                                           add_special, parse_special)
            if got >= 0:
                return buf[:got].copy() if got < n // 2 else buf[:got]
            n = -got
        raise InputError("llama.cpp failed to tokenize the text")

    def decode(self, ids) -> str:
        return self._llm.detokenize([int(i) for i in np.asarray(ids).ravel()], special=True).decode("utf-8", "replace")

    def speed_line(self) -> str:
        """One line for the user: that llama.cpp encoded the text, and how fast."""
        rate = f"{self.n_bytes / self.seconds / 1e6:.2f} MB/s" if self.seconds > 0 else "no text yet"
        return (f"tokenized through llama-cpp-python {self.version}, llama.cpp's own tokenizer ({self.reason}): "
                f"{self.n_bytes / 1e6:,.1f} MB at {rate} on one core")

    def __repr__(self) -> str:
        return f"LlamaCppTokenizer({self.name!r}, n_vocab={self.n_vocab}, fingerprint={self.fingerprint[:16]})"
