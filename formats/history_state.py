"""`.lkh`: the histories `lookupkit serve --state` keeps across restarts, spec'd in SPEC.md ("`.lkh`").

A 64-byte preamble like `.lkc`'s (magic, version, byte-order marker, header length, header sha256, file
size), a UTF-8 JSON header (vocabulary, budgets, and per tenant its id, counts and log section with its
sha256), then the tenants' logs one after another: int32 little-endian tokens, each sequence led by -1.
Version 2 keeps every tenant's log apart, so a file never mixes two tenants' text; version 1 (one History's
log) is still read, as the one tenant "global". A header may record `n_vocab` (the vocabulary's size; files
written before it have none): every id must then be below it. The index is not stored: loading re-indexes each log, so a
file can never hold an index that disagrees with its log. `read` checks everything before anything is
used: a file that fails any check is refused whole.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass

import numpy as np

from lookupkit._version import __version__
from lookupkit.errors import FormatError, VocabMismatchError
from lookupkit.files import atomic_writer, open_input

MAGIC = b"LKHIST\x00\x00"
VERSION = 2
BYTE_ORDER_MARK = 0x0A0B0C0D
PREAMBLE = struct.Struct("<8sIIQ32sQ")  # magic, version, byte order, header length, header sha256, file size
ALIGN = 8
MAX_HEADER = 1 << 24  # bytes: room for rules.TENANTS_MAX tenants' entries
MAX_ID = 64  # characters of a tenant id (serve.tenants makes them: "anonymous", "key:" + 16 hex digits, ...)
GLOBAL = "global"  # the id of a History every client shared (a version 1 file's, --learn-scope global's)
SECTION = {"offset": int, "length": int, "dtype": str, "sha256": str}
FIELDS = {1: {"format": str, "format_version": int, "vocab": (str, type(None)), "budget": int, "n_positions": int,
              "n_sequences": int, "learnt": int, "tool": dict, "log": dict},
          2: {"format": str, "format_version": int, "vocab": (str, type(None)), "budget": int, "tenant_budget": int,
              "tool": dict, "tenants": list}}
TENANT_FIELDS = {"id": str, "budget": int, "n_positions": int, "n_sequences": int, "learnt": int,
                 "last_used_ms": int, "log": dict}


@dataclass
class TenantLog:
    """One tenant's History as a file holds it: its log (int32, sequences led by -1), budget, the sequences
    it learnt in all and when it was last used (ms since the epoch; 0: unknown)."""
    id: str
    log: np.ndarray
    budget: int
    learnt: int
    last_used_ms: int = 0


def write(path, tenants: list, *, vocab: str | None, budget: int, tenant_budget: int, n_vocab: int | None = None) -> None:
    """Write the TenantLogs atomically (temp file, fsync, rename over `path`); n_vocab: the vocabulary's size,
    recorded so that `lookupkit verify` can bound every id (None: not known)."""
    datas = [np.ascontiguousarray(t.log, dtype="<i4").tobytes() for t in tenants]
    entries = [{"id": t.id, "budget": int(t.budget), "n_positions": len(t.log),
                "n_sequences": int(np.count_nonzero(np.asarray(t.log) == -1)), "learnt": int(t.learnt),
                "last_used_ms": int(t.last_used_ms),
                "log": {"offset": 0, "length": len(d), "dtype": "<i4", "sha256": hashlib.sha256(d).hexdigest()}}
               for t, d in zip(tenants, datas)]
    head = {"format": "lkh", "format_version": VERSION, "vocab": vocab, "budget": int(budget),
            "tenant_budget": int(tenant_budget), "tool": {"name": "lookupkit", "version": __version__},
            "tenants": entries, **({"n_vocab": int(n_vocab)} if n_vocab is not None else {})}
    for _ in range(3):  # the offsets depend on the header's length, which depends on the offsets' digits
        header = json.dumps(head, sort_keys=True).encode()
        offset = start = _aligned(PREAMBLE.size + len(header))
        for entry in entries:
            entry["log"]["offset"] = offset
            offset += entry["log"]["length"]
    header = json.dumps(head, sort_keys=True).encode()
    assert _aligned(PREAMBLE.size + len(header)) == start
    pre = PREAMBLE.pack(MAGIC, VERSION, BYTE_ORDER_MARK, len(header), hashlib.sha256(header).digest(), offset)
    with atomic_writer(path) as f:
        f.write(pre + header + b"\0" * (start - PREAMBLE.size - len(header)))
        for data in datas:
            f.write(data)


def read(path, expect_vocab: str | None = None) -> tuple[list, dict]:
    """(TenantLogs, header) of a `.lkh` file, every check passed (FormatError says which failed; a vocabulary
    other than expect_vocab, when both are known, is a VocabMismatchError). A version 1 file's one log is
    the tenant GLOBAL's, and its header gains the tenant_budget of its one History."""
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
    if version not in FIELDS:
        raise bad(f"format version {version}; this lookupkit reads {', '.join(map(str, FIELDS))}"
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
    _check_fields(head, FIELDS[version], bad)
    if head["format"] != "lkh" or head["format_version"] != version:
        raise bad(f"the header's format is not lkh version {version}")
    if version == 1:
        entries = [{**{k: head[k] for k in ("budget", "n_positions", "n_sequences", "learnt", "log")},
                    "id": GLOBAL, "last_used_ms": 0}]
        head = {**head, "tenant_budget": head["budget"]}
    else:
        entries = head["tenants"]
    n_vocab = head.get("n_vocab")  # optional (files before it was recorded have none)
    if n_vocab is not None and (isinstance(n_vocab, bool) or not isinstance(n_vocab, int) or n_vocab < 1):
        raise bad("the header's 'n_vocab' is not a vocabulary size")
    offset = _aligned(PREAMBLE.size + n_header)  # where the next log must start (version 1: anywhere aligned)
    tenants, ids = [], set()
    for entry in entries:
        _check_fields(entry, TENANT_FIELDS, bad)
        _check_fields(entry["log"], SECTION, bad)
        name = entry["id"]
        if not 0 < len(name) <= MAX_ID or not name.isascii() or not name.isprintable() or name in ids:
            raise bad(f"a tenant id is empty, repeated, longer than {MAX_ID} or not printable ASCII")
        ids.add(name)
        info = entry["log"]
        off, length = info["offset"], info["length"]
        if (info["dtype"] != "<i4" or (off != offset if version == 2 else off < offset or off % ALIGN)
                or off + length > len(raw) or length != 4 * entry["n_positions"]):
            raise bad(f"tenant {name}'s log section's place, length or type is not what the header says")
        offset = off + length
        data = raw[off:off + length]
        if hashlib.sha256(data).hexdigest() != info["sha256"]:
            raise bad(f"tenant {name}'s log's sha256 does not match (corrupted)")
        log = np.frombuffer(data, dtype="<i4").astype(np.int32)
        if len(log) and int(log.min()) < -1:
            raise bad(f"tenant {name}'s log holds an id {int(log.min())} below -1")
        if len(log) and n_vocab is not None and int(log.max()) >= n_vocab:
            raise bad(f"tenant {name}'s log holds the id {int(log.max())}, outside the vocabulary of {n_vocab:,} "
                      f"tokens the file records")
        if (entry["n_positions"] > entry["budget"] or entry["budget"] > head["budget"]
                or entry["n_sequences"] != int(np.count_nonzero(log == -1))):
            raise bad(f"tenant {name}'s counts or budget do not match its log or the file's budget")
        tenants.append(TenantLog(name, log, entry["budget"], entry["learnt"], entry["last_used_ms"]))
    if offset != len(raw):
        raise bad("the logs do not end the file")
    if head["tenant_budget"] > head["budget"]:
        raise bad("the tenant budget is larger than the file's budget")
    if expect_vocab is not None and head["vocab"] is not None and head["vocab"] != expect_vocab:
        raise VocabMismatchError(f"{path} holds ids of another vocabulary (fingerprint {head['vocab']}) than this "
                                 f"model's ({expect_vocab})")
    return tenants, head


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _check_fields(doc, fields: dict, bad) -> None:
    if not isinstance(doc, dict):
        raise bad("the header is not a JSON object")
    for name, kind in fields.items():
        value = doc.get(name, KeyError)
        if value is KeyError:
            raise bad(f"the header has no {name!r}")
        if isinstance(value, bool) or not isinstance(value, kind) or (isinstance(value, int) and value < 0):
            raise bad(f"the header's {name!r} is not of the right type")
