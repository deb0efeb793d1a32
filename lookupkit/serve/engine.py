"""The engine: one thread owns the llama.cpp context and serves every request through `--parallel` slots.

Each slot is one llama.cpp sequence id with its own Drafter (over the one shared static cache). A step
builds ONE batch: for every generating slot `[last token] + draft` with logits on exactly those rows,
then prompt chunks of newly admitted requests in the room left (n_batch); one llama_decode; then each
slot verifies its draft (llama_model.verify with the request's sampler), drops its rejected positions with llama_memory_seq_rm and
hands its new tokens to its request. This is llama-server's continuous batching with `-np`: slots
never wait for each other's prompts or drafts to be decoded separately.

Only this thread ever calls llama_decode, from a warm-up decode at start on (so the first client does
not pay for the weights' first pages): llama-cpp-python's OpenMP build runs a process's decodes slower
when more than one thread makes them (bench/RESULTS.md: Figures the code's comments rely on).

HTTP handlers never touch llama.cpp: they `submit` a Job and read its events (Delta, then Done) from
the callback they gave it, which is called in this thread (app.py turns it into an asyncio queue). A
bounded queue of jobs waits behind the slots; `submit` refuses one more (Busy: 503 + Retry-After). A
cancelled job (client gone) leaves its slot at the start of the next step, so within one verify step.

A step's drafts are planned together (`pricing`, the --verify-cost curve, for --policy lookupkit): on these CPUs a
batch of 2 rows costs about what 2 single rows do, so a drafted token that is rejected displaces another slot's
real one, while slots drafting equal lengths share a pass over the weights. Each slot computes its chain and what
each prefix of it is expected to yield; the plan (verify_cost.StepPricer.plan) drafts the prefixes that maximise
the whole step's expected tokens per unit of its cost among the plans that leave no slot expected below
StepPricer.FLOOR of its --draft 0 pace (one slot's long draft must not starve the others). With one busy slot this
is the one-sequence rule exactly. Steps that feed a prompt draft nothing: each drafted row (with its logits, which a
prompt row has not) would delay that request's first token and take its chunk's room.

Drafts are checked against n_vocab before they enter a batch: a cache damaged in a section the O(1)
open does not check can draft any int32 (mutated suffix indexes did), and an id
outside the vocabulary must never reach llama_decode. The bad tail of such a draft is dropped and
counted (metrics: lookupkit_draft_refused_tokens_total), with one warning in the log.

What a finished request teaches depends on `learn` (--learn): "off" (the default), each slot's Drafter
forgets it (every request drafts from the caches as loaded, -lcs/-lcd, plus its own context: no request's
text reaches another's drafts); "dynamic", the slot's Drafter merges it into its own dynamic cache
(llama.cpp's -lcd rule; per slot, unbounded, not saved); "history", it is learnt into its tenant's History,
which the slot's Drafter is pointed at when the request starts (history_for: serve.tenants; one History for
all with --learn-scope global; bounded by --history-budget, saved with --state). A request that failed
("error") teaches nothing. Drafts are verified by the model, so learning never changes an output.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field

import numpy as np

from ..draft.learning import end_sequence
from ..errors import InputError
from ..integrations.llama_model import Batch, Model, Stop, valid_draft, verify
from ..verify_cost import StepPricer
from .sampling import Sampling
from .slots import EMPTY, Slot, choose

log = logging.getLogger("lookupkit.serve")


class Busy(Exception):
    """Every slot is busy and the queue is full, or the server is shutting down (503)."""

    def __init__(self, message: str, retry_after: int = 1):
        super().__init__(message)
        self.retry_after = retry_after


@dataclass
class Delta:
    """New tokens of a request and the text each released (pieces[i] is what tokens[i] released: "" while a
    stop string or a UTF-8 character is still open)."""
    tokens: list
    pieces: list

    @property
    def text(self) -> str:
        """The text that may be sent for the tokens."""
        return "".join(self.pieces)


@dataclass
class Done:
    """The end of a request. reason: a llama_model.Stop (its CTX: the slot's context is full; ERROR: message says
    what failed)."""
    reason: Stop
    text: str = ""
    stats: dict = field(default_factory=dict)
    stopping_word: str = ""
    message: str = ""


@dataclass
class Job:
    """One request as the engine sees it; deliver(event) is called from the engine thread."""
    prompt: np.ndarray
    max_tokens: int
    sampling: Sampling
    deliver: object
    stops: list = field(default_factory=list)
    ignore_eos: bool = False
    cache_prompt: bool = True  # start from the slot cache with the longest common prefix (serve.slots)
    cancelled: bool = False
    tenant: str = "anonymous"  # whose History it drafts from and learns into (serve.tenants.tenant_id)

    def cancel(self) -> None:
        self.cancelled = True


class Engine:
    """llm: a Llama made by open_model(..., parallel=N); make_drafter() -> a Drafter per slot (None: no
    drafting); queue: jobs that may wait behind busy slots; metrics: a serve.metrics.Metrics; history_for(tenant)
    -> the History a job of that tenant drafts from (--learn history), on_learnt() called after one was learnt."""

    def __init__(self, llm, make_drafter, *, parallel: int, queue: int, n_draft: int, metrics, on_batch=None,
                 learn: str = "off", on_learnt=None, history_for=None, pricing=None):
        self.m = Model(llm)
        self.n_ctx_slot = int(self.m.lib.llama_n_ctx_seq(self.m.ctx))
        self.n_draft = n_draft if make_drafter is not None else 0
        if self.m.n_batch < parallel * (self.n_draft + 1):
            raise InputError(f"n_batch {self.m.n_batch} cannot hold {parallel} slots' drafts of {self.n_draft} "
                             f"(open the model with n_batch >= {parallel * (self.n_draft + 1)})")
        self.slots = [Slot(i, make_drafter() if make_drafter else None) for i in range(parallel)]
        self.n_swa = max(1, self.m.n_swa)
        self.queue, self.metrics, self.on_batch = queue, metrics, on_batch
        self.learn, self.on_learnt, self.history_for = learn, on_learnt, history_for
        self.pricer = StepPricer(pricing) if pricing is not None else None  # drafts priced in their shared step
        self.batch = Batch(self.m.lib, self.m.n_batch)
        self._cv = threading.Condition()
        self._pending: deque[Job] = deque()
        self._busy, self._closing, self._warned = 0, False, False
        self._static, self.static_swaps = None, 0  # a static cache to switch to (swap_static), and how many swaps
        self._thread = threading.Thread(target=self._run, name="lookupkit-engine", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: Job) -> None:
        job.prompt = np.asarray(job.prompt, np.int32)
        with self._cv:
            if self._closing:
                raise Busy("the server is shutting down: send the request to another server")
            if self._busy + len(self._pending) >= len(self.slots) + self.queue:
                raise Busy(f"all {len(self.slots)} slots are busy and {self.queue} requests are queued: retry "
                           f"later, or start the server with a larger --queue or --parallel")
            self._pending.append(job)
            self.metrics.gauge("queue_depth", len(self._pending))
            self._cv.notify()

    def swap_static(self, static) -> None:
        """Draft from `static` (an open StaticCache of the model's vocabulary) from now on: each slot switches
        when it next starts a request, so requests in flight finish on the mapping they began with."""
        with self._cv:
            self._static = static
            self.static_swaps += 1

    def cancel(self, job: Job) -> None:
        """Stop a job (its client is gone): out of the queue now, out of its slot within one step."""
        job.cancel()
        with self._cv:
            queued = job in self._pending
            if queued:
                self._pending.remove(job)
                self.metrics.gauge("queue_depth", len(self._pending))
        if queued:
            self._cancelled(job)

    def _cancelled(self, job: Job) -> None:
        """A job cancelled before it had a slot: counted, and told (its handler waits for a Done)."""
        self.metrics.inc("requests_total", outcome="cancelled")
        self._deliver(job, Done(Stop.CANCELLED))

    def close(self) -> None:
        """Refuse new jobs, abort the rest (Done "shutdown": their streams end with an error event) and wait until
        the thread has ended: it stops at the end of its step (one n_batch decode at most), so that nothing frees
        the model under a decode; any other thread may call it, more than once."""
        with self._cv:
            self._closing = True
            self._cv.notify()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()

    @property
    def busy(self) -> int:
        return self._busy

    @property
    def serving(self) -> bool:
        """Whether the engine takes jobs (not shutting down, its thread not stopped by a failure)."""
        return not self._closing and (self._thread.is_alive() or self._thread.ident is None)

    def _run(self) -> None:
        try:
            self.batch.set([0], 0, 1)  # the warm-up: token 0 at position 0 of sequence 0, then forgotten
            self.m.decode(self.batch)
            self.m.forget_from(0, 0)
            while True:
                with self._cv:
                    while not self._closing and not self._pending and not self._busy:
                        self._cv.wait()
                    if self._closing:
                        break
                    dropped, started = [], []
                    while self._pending and self._busy < len(self.slots):
                        job = self._pending.popleft()
                        if job.cancelled:  # its client left while cancel() waited for the lock
                            dropped.append(job)
                            continue
                        slot, keep = choose([s for s in self.slots if s.job is None], job)
                        if slot.drafter is not None and slot.swaps != self.static_swaps:
                            slot.drafter.use_static(self._static)
                            slot.swaps = self.static_swaps
                        slot.start(job, self.m.piece)
                        started.append((slot, keep))
                        self._busy += 1
                    self.metrics.gauge("queue_depth", len(self._pending))
                    self.metrics.gauge("slots_busy", self._busy)
                for job in dropped:
                    self._cancelled(job)
                for slot, keep in started:
                    slot.fed = slot.cache_n = self._keep(slot, keep)
                self._step()
        except Exception as exc:  # llama.cpp or a bug: every request is told, none hangs
            log.exception("the engine stopped")
            self._end_all(Stop.ERROR, f"the engine stopped: {exc}")
        finally:
            self._end_all(Stop.SHUTDOWN, "the server is shutting down: retry on another server, or later")
            self.batch.free()

    def _keep(self, slot: Slot, keep: int) -> int:
        """Cut the slot's KV cache to the first `keep` tokens of its cache, or to nothing where a sliding-window
        layer no longer holds the cells decoding from there needs (llama-server's test); returns what is kept."""
        if 0 < keep < len(slot.cached) and self.m.pos_min(slot.seq) > max(0, keep - self.n_swa):
            keep = 0
        self.m.forget_from(keep, slot.seq)
        self.metrics.inc("prompt_tokens_reused_total", by=keep)
        return keep

    def _step(self) -> None:
        b, m = self.batch, self.m
        b.clear()
        work, fed, live = [], [], []
        for slot in self.slots:
            if slot.job is not None and slot.job.cancelled:
                self._finish(slot, Done(Stop.CANCELLED))
            elif slot.job is not None and slot.tok is not None:
                live.append(slot)
        drafts = self._drafts(live)
        for slot in live:  # in slot order: llama.cpp decodes a run of consecutive sequences in one pass (verify_cost.passes)
            pos = len(slot.job.prompt) + len(slot.out) - 1  # the last emitted token's, not yet in the KV cache
            work.append((slot, b.add([slot.tok, *drafts[slot.seq]], pos, 1 + len(drafts[slot.seq]), slot.seq),
                         drafts[slot.seq]))
        for slot in self.slots:
            room = b.capacity - b.b.n_tokens
            if not slot.feeding or room <= 0:
                continue
            if not slot.primed and slot.drafter is not None:
                if self.history_for is not None:  # the job's tenant's History, before the drafter sees its prompt
                    slot.drafter.use_history(self.history_for(slot.job.tenant))
                slot.drafter.accept(slot.job.prompt)
            slot.primed = True
            chunk = slot.job.prompt[slot.fed:slot.fed + room]
            last = slot.fed + len(chunk) == len(slot.job.prompt)
            row = b.add(chunk, slot.fed, int(last), slot.seq)
            slot.fed += len(chunk)
            fed.append(slot)
            if last:
                work.append((slot, row + len(chunk) - 1, None))
        if b.b.n_tokens == 0:
            return
        t = time.perf_counter()
        try:
            m.decode(b)
        except InputError as exc:  # those slots' KV cells are in an unknown state: their requests fail, others go on
            for slot in dict.fromkeys([x[0] for x in work] + fed):
                self._finish(slot, Done(Stop.ERROR, message=str(exc)))
            return
        self.metrics.inc("decode_calls_total")
        self.metrics.inc("decode_seconds_total", by=time.perf_counter() - t)
        got = {}
        for slot, row, draft in work:
            if self.on_batch is not None:  # for checks, not speed: (seq, first position, tokens, their rows)
                toks = [slot.tok, *draft] if draft is not None else [int(slot.job.prompt[-1])]
                pos = len(slot.job.prompt) + len(slot.out) - 1
                self.on_batch(slot.seq, pos, toks, np.stack([m.row(row + j) for j in range(len(toks))]))
            if draft is None:
                slot.t1 = time.perf_counter()
                self.metrics.inc("prompt_tokens_total", by=len(slot.job.prompt) - slot.cache_n)
                if slot.job.max_tokens == 0:  # the prompt only (llama-server's n_predict 0): now in the cache
                    self._finish(slot, Done(Stop.LENGTH))
                else:
                    self._emit(slot, [slot.picker(m.row(row))], [], 0)  # may finish the slot (its job is then gone)
            else:
                new = verify(slot.picker, lambda j: m.row(row + j), draft)
                n_acc = len(new) - 1
                if n_acc < len(draft):
                    m.forget_from(len(slot.job.prompt) + len(slot.out) + n_acc, slot.seq)
                slot.calls += 1
                self.metrics.inc("verify_calls_total")
                self._emit(slot, new, draft, n_acc)
                if slot.job is not None:  # still serving: its pace is kept (StepPricer.settle)
                    got[slot.seq] = len(new)
        if self.pricer is not None:
            self.pricer.settle(got)

    def _drafts(self, live: list) -> dict:
        """{seq: draft} of the busy slots, planned together (StepPricer.drafts); none in a step that feeds a prompt
        or past Slot.room; a draft's ids are checked against the vocabulary before any enters a batch."""
        feeding = any(slot.feeding for slot in self.slots)  # a prompt goes in this step
        jobs = [(slot.seq, slot.drafter, min(self.n_draft, slot.room(self.n_ctx_slot))
                 if slot.drafter is not None and not feeding else 0) for slot in live]
        drafts = self.pricer.drafts(jobs) if self.pricer is not None else {
            seq: drafter.draft(None, k) if k > 0 else [] for seq, drafter, k in jobs}
        for seq, draft in drafts.items():
            drafts[seq], cut = valid_draft(draft, self.m.n_vocab)
            if cut:
                self.metrics.inc("draft_refused_tokens_total", by=cut)
                if self.pricer is not None:  # the step is priced as it runs
                    self.pricer.layout[seq] = 1 + len(drafts[seq])
                if not self._warned:
                    self._warned = True
                    log.warning("a draft held a token id outside this model's vocabulary of %d: the cache is "
                                "damaged (check it with lookupkit verify); such drafts are cut there", self.m.n_vocab)
        return drafts

    def _emit(self, slot: Slot, new: list, draft: list, n_acc: int) -> None:
        job, done, text, taken = slot.job, None, [], []
        for tok in new:
            slot.out.append(tok)
            taken.append(tok)
            if not job.ignore_eos and self.m.is_eog(tok):
                done = Done(Stop.EOS)
                text.append("")
            else:
                text.append(slot.text.push((tok,)))
                if slot.text.stopped_by is not None:
                    done = Done(Stop.WORD, stopping_word=slot.text.stopped_by)
            if done is None and len(slot.out) >= job.max_tokens:
                done = Done(Stop.LENGTH)
            if done is None and len(job.prompt) + len(slot.out) >= self.n_ctx_slot:
                done = Done(Stop.CTX)
            if done is not None:
                break
        slot.tok = taken[-1]
        if draft:
            n_in = min(n_acc, len(taken))  # drafted tokens that are in the output
            slot.drafted += len(draft)
            slot.accepted += n_in
            sources = slot.drafter.last_sources[:len(draft)]
            for source, n in Counter(sources).items():
                self.metrics.inc("drafted_tokens_total", by=n, source=source)
            for source, n in Counter(sources[:n_in]).items():
                self.metrics.inc("accepted_tokens_total", by=n, source=source)
        self.metrics.inc("generated_tokens_total", by=len(taken))
        self.metrics.tokens(len(taken))
        if slot.drafter is not None:
            slot.drafter.accept(taken)
        self._deliver(job, Delta(taken, text))
        if done is not None:
            self._finish(slot, done)

    def _finish(self, slot: Slot, done: Done) -> None:
        job = slot.job
        done.text = slot.text.finish() if done.reason not in (Stop.CANCELLED, Stop.ERROR) else ""
        done.stats = slot.stats()
        cached = slot.in_cache() if done.reason != Stop.ERROR else EMPTY  # an error leaves cells of unknown state
        self.m.forget_from(len(cached), slot.seq)
        if slot.drafter is not None:
            self._learn(slot.drafter, done.reason != Stop.ERROR)
        slot.idle(cached)
        with self._cv:
            self._busy -= 1
            self.metrics.gauge("slots_busy", self._busy)
        self.metrics.inc("requests_total", outcome=done.reason.value)
        self._deliver(job, done)

    def _learn(self, drafter, ok: bool) -> None:
        """End the slot's sequence, learning it as --learn says (draft.learning: the rule the replay of a
        request log follows too)."""
        if end_sequence(drafter, self.learn, ok) and self.on_learnt is not None:
            self.on_learnt()

    def _end_all(self, reason: Stop, message: str) -> None:
        for slot in self.slots:
            if slot.job is not None:
                self._finish(slot, Done(reason, message=message))
        with self._cv:
            self._closing = True
            pending, self._pending = list(self._pending), deque()
        for job in pending:
            self.metrics.inc("requests_total", outcome=reason.value)
            self._deliver(job, Done(reason, message=message))

    @staticmethod
    def _deliver(job: Job, event) -> None:
        try:
            job.deliver(event)
        except RuntimeError:  # the handler's event loop is gone (server stopping): nobody to tell
            pass
