"""`lookup-create --ray local|ADDRESS`: tokenizing, counting and merging as Ray tasks; the driver writes.

The driver streams the sources and cuts them exactly as the local parallel build does
(`build.parallel.tokenize_count` / `count_ids`, the same pieces, the same straddling triples), but
each piece goes to a Ray task that tokenizes it, counts its triples and returns them as one sorted
run per key range (first-token ranges fixed up front, RANGES_PER_CPU per CPU of the cluster, so the
merge tasks balance by number). Runs stay in Ray's object store (spilled by Ray as it fills); one
merge task per range k-way merges that range's runs on a worker and returns the range's pairs, keys
and follower counts; the driver writes them to its work directory and streams the file from there
(`formats.streamed`), byte-identical to the local build. Ray retries a task whose worker died
(RETRIES times), after which the build fails with one line. `local` starts a Ray instance with
`jobs` CPUs for the build and shuts it down; an address joins an existing cluster (left running).
"""

from __future__ import annotations

import os

import numpy as np

from lookupkit.create.parallel import Boundaries, CountedDoc, count_ids, tokenize_count
from lookupkit.create.tokenized import token_doc
from lookupkit.corpora.stream import Utf8Decoder
from lookupkit.counts.bigrams import FollowerCounter
from lookupkit.counts.runs import merge_arrays, part_from_arrays, split_by_t0
from lookupkit.errors import InputError, LookupkitError

RANGES_PER_CPU = 4
RETRIES = 3


def _ray():
    try:
        import ray
    except ImportError:
        raise InputError("--ray needs Ray: pip install 'lookupkit[ray]'") from None
    return ray


def _piece(tokenizer, spec, bounds, task):
    """Tokenize (text) or take (ids) one piece; its triples as one sorted run per key range."""
    if task[0] == "text":
        _, idx, data, first, last, _ = task
        decoder = Utf8Decoder()
        ids = tokenizer.encode_segment(decoder.decode(data, final=True), first=first, last=last)
        replaced = decoder.replaced_bytes
    else:
        _, idx, ids, doc_no, offset = task
        replaced = 0
    ids = np.asarray(ids, dtype=np.int32)
    counter = FollowerCounter(spec.n_vocab, spec.chunk_tokens, vocab_name=spec.vocab_name, id_bound=spec.id_bound)
    if task[0] == "ids":
        counter.n_documents = doc_no
        counter._check_ids(ids, offset)
    counter.add_document(ids)
    keys, counts = counter.merged_run()
    meta = ("piece", idx, len(ids), ids[:2].copy(), ids[-2:].copy(), replaced, None)
    return [meta, *split_by_t0(keys, counts, bounds)]


def _merge(*runs):
    return merge_arrays(list(runs))


class RayWorkers:
    """The `build.parallel.Workers` interface over Ray tasks (pieces only)."""

    def __init__(self, ray, tokenizer, spec, bounds: list[int], in_flight: int):
        self.ray, self.bounds, self.in_flight = ray, bounds, in_flight
        n_out = len(bounds) + 2
        self.piece = ray.remote(num_returns=n_out, max_retries=RETRIES)(_piece)
        self.tok_ref, self.spec = ray.put(tokenizer), spec
        self.outstanding: list = []  # meta refs
        self.range_refs: list[list] = [[] for _ in range(len(bounds) + 1)]

    def submit(self, task, wid=None) -> list:
        refs = self.piece.remote(self.tok_ref, self.spec, self.bounds, task)
        self.outstanding.append(refs[0])
        for r, ref in enumerate(refs[1:]):
            self.range_refs[r].append(ref)
        got = []
        while len(self.outstanding) > self.in_flight:
            got += self._take(1)
        return got

    def _take(self, n: int) -> list:
        done, self.outstanding = self.ray.wait(self.outstanding, num_returns=n)
        return [_get(self.ray, ref) for ref in done]

    def wait_all(self) -> list:
        return self._take(len(self.outstanding)) if self.outstanding else []


def _get(ray, ref):
    try:
        return ray.get(ref)
    except ray.exceptions.RayError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, LookupkitError):
            raise InputError(str(cause)) from None
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"a Ray task failed after {RETRIES} retries ({type(exc).__name__}: {first}); "
                         "nothing was written") from None


def count_on_ray(address: str, sources, tokenizer, spec, text_budget, plan, work: str):
    """Count `sources` on Ray; returns (docs, skipped, parts) as the local build does."""
    ray = _ray()
    local = address == "local"
    if ray.is_initialized():
        started = False
    else:
        try:
            if local:
                ray.init(num_cpus=plan.jobs, include_dashboard=False, log_to_driver=False,
                         configure_logging=False, _temp_dir=os.environ.get("LOOKUPKIT_RAY_TMP"))
            else:
                ray.init(address=address, log_to_driver=False, configure_logging=False)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise InputError(f"cannot start or join Ray at {address!r}: {str(exc).splitlines()[0]}") from None
        started = True
    try:
        return _count(ray, sources, tokenizer, spec, text_budget, plan, work)
    finally:
        if started:
            ray.shutdown()


def _count(ray, sources, tokenizer, spec, text_budget, plan, work):
    cpus = max(1, int(ray.cluster_resources().get("CPU", plan.jobs)))
    top = spec.id_bound or spec.n_vocab
    n_ranges = min(RANGES_PER_CPU * cpus, top)
    bounds = sorted({top * i // n_ranges for i in range(1, n_ranges)} - {0})
    workers = RayWorkers(ray, tokenizer, spec, bounds, in_flight=2 * cpus)
    joints, docs, skipped = Boundaries(), [], []
    for n, source in enumerate(sources):
        if source.kind == "tokens":
            doc = token_doc(source)
            count_ids(doc.arrays(), workers, joints, n)
            docs.append(CountedDoc(doc.source, n_bytes=doc.n_bytes, sha256=doc.sha256, counted_tokens=doc.n_tokens))
        elif text_budget.exhausted:
            skipped.append(source.describe())
        else:
            doc = tokenize_count(source, text_budget, tokenizer, workers, joints, None, lambda b: None)
            (docs.append(doc) if doc.n_bytes else skipped.append(source.describe()))
    counter = FollowerCounter(spec.n_vocab, spec.chunk_tokens, vocab_name=spec.vocab_name, id_bound=spec.id_bound)
    for joint in joints.joints:
        counter.add_document(joint)
    for r, run in enumerate(split_by_t0(*counter.merged_run(), bounds)):
        workers.range_refs[r].append(ray.put(run))
    merge = ray.remote(num_returns=3, max_retries=RETRIES)(_merge)
    outs = [merge.remote(*refs) for refs in workers.range_refs]
    parts = []
    for r, (p, k, ln) in enumerate(outs):
        parts.append(part_from_arrays(os.path.join(work, f"part-{r:04d}"), _get(ray, p), _get(ray, k), _get(ray, ln)))
    return docs, skipped, parts

