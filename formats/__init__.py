"""Static cache file formats: one registry (name, magic, extensions, open, write) over the formats' modules.

`lkc` (lookupkit's own, SPEC.md), `lkc.zst` (the same, zstd-compressed), `ggngcmap` (the constmap
fork's file) and `llama` (llama.cpp's legacy -lcs/-lcd file). Reading detects by magic where a format
has one (the legacy file has none), by extension otherwise; conversions always go through a
StaticTable, never format to format (`lookupkit.static.read_table` reads any format into one).

Every on-disk fact is named here, and the package sits below the core: what reads a file imports
nothing of lookupkit but its leaf modules (errors, files, kernels, _version), so tokenizer, counts, static,
suffix, policy and draft import it; what writes a file from a table, or reads one into a table, sits above the
counts and below static, policy and draft (tests/test_format_layers.py holds both).

Readers and layouts (below the counts): constmap (VMAP0001, the map every format holds: layout and
view), constmap_probe (its lookups and checksum, in numba), constmap_build (building one, in numba),
spans (the 2-gram map's value: offset << SPAN_BITS | n_followers), lkc_layout (the .lkc preamble,
header and section facts), lkc_read (opening a .lkc in O(1)), lkc_orders and lkc_suffix (the .lkc
sections of the higher orders and of the suffix index), ggngcmap (its writer takes a table but imports
none), mapped (what opening a file hands to StaticCache), llama_scan (the compiled pass over a legacy
file), history_state (`.lkh`, served Histories kept across restarts, each tenant's apart) and token_store
(`.lkt`, a corpus's token ids as the token store keeps them).

Writers (above the counts): lkc_write (a .lkc from a table, and `in_memory`), zst (`.lkc.zst`: unpacked
once, written through lkc_write), llama (the legacy file read into and written from n-gram tables),
streamed (a table on disk in parts, written with bounded memory) and registry (every format's reader
and writer by name; its names are this package's face, imported at first use).
"""

from lookupkit._lazy import lazy_faces

__all__ = ["FORMATS", "REGISTRY", "Format", "Mapped", "detect", "format_for_path", "in_memory", "open_mapped",
           "read_ngrams", "write_table"]

# The faces are imported at first use: a module that reads one format (lookupkit.counts, static, draft)
# imports it alone, without the writers and the counts they stand on.
__getattr__ = lazy_faces(__name__, {
    **{name: ".registry" for name in ("BY_NAME", "FORMATS", "MAGIC_BYTES", "REGISTRY", "Format", "detect",
                                      "format_for_path", "open_mapped", "read_ngrams", "write_table")},
    "Mapped": ".mapped", "in_memory": ".lkc_write"})


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
