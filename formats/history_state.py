"""`.lkh`: a History kept across restarts (`lookupkit serve --state`), spec'd in SPEC.md ("`.lkh`").

A 64-byte preamble like `.lkc`'s (magic, version, byte-order marker, header length, header sha256, file
size), a UTF-8 JSON header (vocabulary, budget, counts, the log section with its sha256), then the log:
int32 little-endian tokens, each sequence led by -1. The index is not stored: loading re-indexes the log
(O(n): 0.9 s for 2^20 positions here, the index's random writes), so a file can never hold an index that disagrees with its log. `read`
checks everything before anything is used: a file that fails any check is refused whole.
"""

from __future__ import annotations

import hashlib
import json
import struct

import numpy as np

from lookupkit._version import __version__
from lookupkit.errors import FormatError, VocabMismatchError
from lookupkit.files import atomic_writer, open_input

MAGIC = b"LKHIST\x00\x00"
VERSION = 1
BYTE_ORDER_MARK = 0x0A0B0C0D
PREAMBLE = struct.Struct("<8sIIQ32sQ")  # magic, version, byte order, header length, header sha256, file size
ALIGN = 8
MAX_HEADER = 1 << 20
FIELDS = {"format": str, "format_version": int, "vocab": (str, type(None)), "budget": int, "n_positions": int,
          "n_sequences": int, "learnt": int, "tool": dict, "log": dict}
LOG_FIELDS = {"offset": int, "length": int, "dtype": str, "sha256": str}


def write(path, log: np.ndarray, *, vocab: str | None, budget: int, learnt: int) -> None:
    """Write the log (int32, sequences led by -1) atomically: temp file, fsync, rename over `path`."""
    data = np.ascontiguousarray(log, dtype="<i4").tobytes()
    head = {"format": "lkh", "format_version": VERSION, "vocab": vocab, "budget": int(budget),
            "n_positions": len(log), "n_sequences": int(np.count_nonzero(np.asarray(log) == -1)),
            "learnt": int(learnt), "tool": {"name": "lookupkit", "version": __version__},
            "log": {"offset": 0, "length": len(data), "dtype": "<i4", "sha256": hashlib.sha256(data).hexdigest()}}
    for _ in range(2):  # the offset depends on the header's length, which depends on the offset's digits
        header = json.dumps(head, sort_keys=True).encode()
        offset = -(-(PREAMBLE.size + len(header)) // ALIGN) * ALIGN
        head["log"]["offset"] = offset
    header = json.dumps(head, sort_keys=True).encode()
    assert PREAMBLE.size + len(header) <= offset
    size = offset + len(data)
    pre = PREAMBLE.pack(MAGIC, VERSION, BYTE_ORDER_MARK, len(header), hashlib.sha256(header).digest(), size)
    with atomic_writer(path) as f:
        f.write(pre + header + b"\0" * (offset - PREAMBLE.size - len(header)) + data)


def read(path, expect_vocab: str | None = None) -> tuple[np.ndarray, dict]:
    """(log, header) of a `.lkh` file, every check passed (FormatError says which failed; a vocabulary other
    than expect_vocab, when both are known, is a VocabMismatchError)."""
    with open_input(path, "history state") as f:
        raw = f.read()

    def bad(why: str) -> FormatError:
        return FormatError(f"{path} is not a valid lookupkit history state: {why}")

    if len(raw) < PREAMBLE.size:
        raise bad(f"{len(raw)} bytes, shorter than the {PREAMBLE.size}-byte preamble")
    magic, version, bom, n_header, digest, size = PREAMBLE.unpack_from(raw)
    if magic != MAGIC:
        raise bad(f"its first bytes are {magic!r}, not {MAGIC!r}")
    if bom != BYTE_ORDER_MARK:
        raise bad("written with another byte order")
    if version != VERSION:
        raise bad(f"format version {version}; this lookupkit reads {VERSION}"
                  + (" (written by a newer lookupkit)" if version > VERSION else ""))
    if size != len(raw):
        raise bad(f"the file has {len(raw):,} bytes where its preamble says {size:,} (truncated or cut short)")
    if n_header > MAX_HEADER or PREAMBLE.size + n_header > len(raw):
        raise bad(f"a header of {n_header:,} bytes does not fit")
    header = raw[PREAMBLE.size:PREAMBLE.size + n_header]
    if hashlib.sha256(header).digest() != digest:
        raise bad("the header's sha256 does not match")
    try:
        head = json.loads(header.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise bad(f"the header is not JSON ({exc})") from None
    _check_fields(head, FIELDS, bad)
    log_info = head["log"]
    _check_fields(log_info, LOG_FIELDS, bad)
    if head["format"] != "lkh" or head["format_version"] != VERSION:
        raise bad("the header's format is not lkh version 1")
    off, length = log_info["offset"], log_info["length"]
    if (log_info["dtype"] != "<i4" or off < PREAMBLE.size + n_header or off % ALIGN or off + length != len(raw)
            or length != 4 * head["n_positions"]):
        raise bad("the log section's place, length or type is not what the header says")
    data = raw[off:off + length]
    if hashlib.sha256(data).hexdigest() != log_info["sha256"]:
        raise bad("the log's sha256 does not match (corrupted)")
    log = np.frombuffer(data, dtype="<i4").astype(np.int32)
    if len(log) and int(log.min()) < -1:
        raise bad(f"the log holds an id {int(log.min())} below -1")
    if head["n_positions"] > head["budget"] or head["n_sequences"] != int(np.count_nonzero(log == -1)):
        raise bad("the header's counts do not match the log")
    if expect_vocab is not None and head["vocab"] is not None and head["vocab"] != expect_vocab:
        raise VocabMismatchError(f"{path} holds ids of another vocabulary (fingerprint {head['vocab']}) than this "
                                 f"model's ({expect_vocab})")
    return log, head


def _check_fields(doc, fields: dict, bad) -> None:
    if not isinstance(doc, dict):
        raise bad("the header is not a JSON object")
    for name, kind in fields.items():
        value = doc.get(name, KeyError)
        if value is KeyError:
            raise bad(f"the header has no {name!r}")
        if isinstance(value, bool) or not isinstance(value, kind) or (isinstance(value, int) and value < 0):
            raise bad(f"the header's {name!r} is not of the right type")
