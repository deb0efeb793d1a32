"""The verify-cost model: what a draft call costs, so that a replay's acceptance becomes a speed-up.

A call that drafts k tokens verifies 1 + k positions in one batch. In plain decoding steps it costs
1 + C * k for a constant C per drafted position (`--verify-cost 0.1`), or curve[k] as `lookupkit
calibrate` measured it on a model (`--verify-cost curve.json`). Plain decoding costs one step per
token; a call yields accepted + 1 tokens, so the expected speed-up is S = sum(accepted + 1) / sum(cost).
Drafting's own time is left out: microseconds per call against the milliseconds of a model evaluation.

A server decodes every busy slot's row and drafts in one step, so a slot's draft is priced by what it adds to
that shared step: `step(n_seqs, rows)` is the cost of one decode of `rows` rows over `n_seqs` sequences
(`lookupkit calibrate --slots N` measures it; without that, a curve's 1 + k rows stand in for any rows); a step
whose slots draft unequal lengths is several such decodes (`passes`), and `StepPricer` plans how much of each slot's
chain a step drafts.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

from .errors import FormatError, InputError
from .files import atomic_writer, open_input

FORMAT = "lookupkit-verify-cost-1"
DEFAULT_COST = 0.1  # the verify cost per drafted token assumed when none is given (measure yours: calibrate)
REPORTED_COSTS = (0.0, 0.05, 0.1, 0.25, 0.5, 1.0)  # the constant costs every replay reports S(C) at


class VerifyCost:
    """A constant cost per drafted position, or a measured curve {k: cost of 1 + k / cost of 1}."""

    def __init__(self, constant: float | None = None, curve: dict | None = None, source: str | None = None,
                 others_cores: float | None = None, batch: dict | None = None):
        if (constant is None) == (curve is None):
            raise InputError("a verify cost is either a constant or a calibration curve")
        if constant is not None and not (isinstance(constant, (int, float)) and 0 <= constant < math.inf):
            raise InputError(f"--verify-cost must be a finite number >= 0 or a calibration JSON file, got {constant!r}")
        self.constant, self.curve, self.source = constant, curve, source
        self.others_cores = others_cores  # cores other processes used while a curve was measured (if recorded)
        # {n_seqs: (rows, costs)}: a step of `rows` rows over n_seqs sequences, relative to one token (calibrate --slots)
        self.batch = {int(n): (np.asarray(r, np.float64), np.asarray(c, np.float64)) for n, (r, c) in (batch or {}).items()}

    @classmethod
    def parse(cls, text: str) -> "VerifyCost":
        """`--verify-cost`: a number, or the path of a calibration written by `lookupkit calibrate -o`."""
        try:
            return cls(constant=float(text))
        except ValueError:
            data = load_curve(text)
            busy = data.get("others_cores")
            batch = {n: (sorted(pts), [pts[r] for r in sorted(pts)]) for n, pts in data.get("batch", {}).items()}
            return cls(curve=data["curve"], source=str(text),
                       others_cores=float(busy) if isinstance(busy, (int, float)) else None, batch=batch)

    def call_costs(self, n_drafted: np.ndarray) -> np.ndarray:
        d = np.asarray(n_drafted, dtype=np.int64)
        if self.constant is not None:
            return 1.0 + self.constant * d
        missing = sorted(set(np.unique(d).tolist()) - set(self.curve))
        if missing:
            raise InputError(f"calls drafted {missing[-1]} tokens but the calibration curve stops at "
                             f"k = {max(self.curve)}; calibrate with --max-k {missing[-1]}")
        table = np.array([self.curve.get(k, np.nan) for k in range(max(self.curve) + 1)])
        return table[d]

    def at(self, k: int) -> float:
        """The cost of verifying 1 + k tokens, relative to 1 (inf past a measured curve)."""
        if self.constant is not None:
            return 1.0 + self.constant * k
        return float(self.curve.get(k, math.inf))

    def step(self, n_seqs: int, rows: int) -> float:
        """The cost of one decode of `rows` rows over n_seqs sequences, relative to one token (inf where
        nothing measured reaches): the --slots surface for n_seqs, interpolated between its measured rows;
        else the curve's 1 + k = rows (a step's cost follows its rows far more than its sequences)."""
        if n_seqs in self.batch:
            r, c = self.batch[n_seqs]
            return float(np.interp(rows, r, c)) if r[0] <= rows <= r[-1] else math.inf
        return self.at(rows - 1)

    def layout(self, rows) -> float:
        """The cost of one server step whose slots, in sequence order, decode rows[i] rows each (0: idle): the sum
        of its passes (`passes`), each priced by `step`."""
        return sum(self.step(n, r) for n, r in passes(rows))

    @classmethod
    def of(cls, value) -> "VerifyCost":
        """A VerifyCost from itself, a number, or the text of `--verify-cost` (a number or a curve file)."""
        if isinstance(value, VerifyCost):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return cls(constant=float(value))
        if isinstance(value, (str, os.PathLike)):
            return cls.parse(os.fspath(value))
        raise InputError(f"a verify cost is a number, a calibration file or a VerifyCost, got {value!r}")

    def describe(self):
        return self.constant if self.constant is not None else f"curve {self.source}"


def passes(rows) -> list[tuple[int, int]]:
    """(sequences, rows) of each pass llama.cpp's decode makes over a batch whose sequences 0, 1, .. decode rows[i]
    rows each, in that order, with a KV stream per sequence (llama-server's and lookupkit's -np contexts): a pass
    takes the same number of rows from each of a run of consecutive busy sequences, so unequal drafts and idle
    slots between busy ones split a step into more passes over the weights (bench/serve/kv_layout measures it).
    llama.cpp also ends a pass at n_ubatch rows, which a step of drafts does not reach here."""
    left, out = list(rows), []
    while True:
        first = next((i for i, r in enumerate(left) if r > 0), None)
        if first is None:
            return out
        end = first + 1
        while end < len(left) and left[end] > 0:
            end += 1
        m = min(left[first:end])
        out.append((end - first, m * (end - first)))
        for i in range(first, end):
            left[i] -= m


class StepPricer:
    """Plans the drafts of one step shared by the busy slots (serve.engine; replay-requests --parallel replays it):
    each slot computes its chain under `offer`, then `plan` chooses how much of each chain the step drafts so that
    the step's expected tokens per unit of its cost (its passes: `passes`) is largest. Slots drafting equal lengths
    share one pass over the weights, which no slot pricing its own draft beside the others' single rows sees
    (bench/RESULTS.md: Drafts planned together). With one busy slot the plan is the one-sequence rule exactly."""

    KEPT = 4096  # step costs and offers kept (by layout): a server's steps repeat a few
    # Past 16 tokens a plan of several slots weighs these lengths and the whole chain only: weighing every length
    # lost 1-3 % in held-out replays at 4 clients (bench/RESULTS.md: Drafts planned together), as the lengths it
    # adds are chosen where their expectations run highest.
    SEARCHED = tuple(range(17)) + (20, 24, 28, 32, 40, 48, 56, 64)
    # No plan is to leave a busy slot expected below FLOOR of the pace --draft 0 would give it in the steps it
    # shares, or further below than drafting nothing would (one slot's long draft makes a step several times dearer
    # for all: bench/RESULTS.md: A floor under every slot's pace); CREDIT tokens ahead of that pace may be banked, so
    # that a long draft is rationed, not banned. A llama.cpp-rule drafter's own draft is not planned, so not held.
    FLOOR, CREDIT = 0.8, 4.0

    def __init__(self, cost: VerifyCost):
        self.cost, self._memo, self.lag = cost, {}, {}
        self.start([0])

    def start(self, seqs) -> None:
        """A new step of the busy slots `seqs` (their sequence ids), nothing drafted yet."""
        self.seqs = list(seqs)
        self.layout = [0] * (max(seqs) + 1 if len(seqs) else 0)
        for seq in seqs:
            self.layout[seq] = 1
        self.plain = self.layout_cost(self.layout)

    def settle(self, got: dict) -> None:
        """After a step: {seq: tokens it emitted} of the slots still serving. In a step of several busy slots each
        one's lag behind FLOOR of its --draft 0 pace (tokens; negative: ahead, at most CREDIT) follows; a step of one
        (or one past what was measured) leaves it as it was; a slot not in `got` (its request ended, or its next
        one is being fed) starts over."""
        cost = self.cost_of_step()
        shared = len(self.seqs) > 1 and self.plain < math.inf and cost < math.inf
        due = self.FLOOR * cost / self.plain if shared else 0.0
        self.lag = {seq: max(-self.CREDIT, self.lag.get(seq, 0.0) + due - n) if shared else self.lag.get(seq, 0.0)
                    for seq, n in got.items()}

    def cost_of_step(self) -> float:
        """The step's cost with the drafts planned so far, relative to one token."""
        return self.layout_cost(self.layout)

    def layout_cost(self, rows) -> float:
        """`VerifyCost.layout`, kept: a plan weighs the same few layouts many times."""
        key = tuple(rows)
        if key not in self._memo:
            if len(self._memo) >= self.KEPT:
                self._memo.clear()
            self._memo[key] = self.cost.layout(rows)
        return self._memo[key]

    def offer(self, k: int, seq: int) -> tuple:
        """Drafter.draft's price for slot seq's chain of at most k tokens: cost[j] the cheaper of the step with every
        busy slot drafting j and of the step with slot seq alone drafting j, relative to the step without drafts,
        and no others (a chain is computed as far as an equal or a lone draft of it could pay); one busy slot: the
        curve."""
        key = (tuple(self.layout), seq, k)
        if key not in self._memo:
            plain = list(self.layout)
            base = self.layout_cost(plain)
            out = np.full(k + 1, math.inf)
            out[0] = 1.0
            for j in range(1, k + 1 if base < math.inf else 1):  # a step past what was measured: no draft is priced
                alone = list(plain)
                alone[seq] = 1 + j
                out[j] = min(self.layout_cost([r + j if r else 0 for r in plain]), self.layout_cost(alone)) / base
            self._memo[key] = out
        return self._memo[key], 0.0

    def plan(self, chains: dict) -> dict:
        """{seq: tokens to draft} from the busy slots' chains {seq: E}, E[j] the tokens its first j would yield
        (Drafter.plan; a busy slot not in `chains` decodes the rows the layout gives it and is expected to yield one
        token), among the plans that leave no busy slot behind FLOOR of its pace (or further behind than drafting
        nothing would): the best plan where every slot drafts min(j, its chain) for one j, improved slot by slot
        (each its best length beside the others') until none changes, 4 rounds at most; the layout is then the plan's."""
        seqs = list(chains)
        others = sum(1 for s in self.seqs if s not in chains)
        lengths = {s: sorted({j for j in self.SEARCHED if j < len(e)} | {len(e) - 1}) for s, e in chains.items()}
        rows = list(self.layout)

        def lags(d: dict, cost: float) -> dict:  # each busy slot's lag after a step of plan d costing `cost`
            due = self.FLOOR * cost / self.plain if self.plain < math.inf else 0.0
            return {s: self.lag.get(s, 0.0) + due - (chains[s][d[s]] if s in chains else 1.0) for s in self.seqs}

        # the lag a slot may end the step with: none, or what the step without these drafts would leave it
        allowed = {s: max(0.0, v) for s, v in lags(dict.fromkeys(seqs, 0), self.layout_cost(rows)).items()}

        def value(d: dict) -> float:
            for s in seqs:
                rows[s] = 1 + d[s]
            cost = self.layout_cost(rows)
            if cost == math.inf:
                return 0.0
            if any(v > allowed[s] + 1e-12 for s, v in lags(d, cost).items()):
                return -1.0  # a slot would fall behind its floor (the plan drafting nothing never does)
            return (others + sum(chains[s][d[s]] for s in seqs)) / cost

        best, best_v = {s: 0 for s in seqs}, -1.0
        for j in sorted({j for s in seqs for j in lengths[s]}):
            d = {s: min(j, len(chains[s]) - 1) for s in seqs}
            v = value(d)
            if v > best_v:
                best, best_v = d, v
        for _ in range(4):
            changed = False
            for s in seqs:
                for j in lengths[s]:
                    v = value({**best, s: j})
                    if v > best_v * (1 + 1e-12):
                        best, best_v, changed = {**best, s: j}, v, True
            if not changed:
                break
        for s in seqs:
            self.layout[s] = 1 + best[s]
        return best

    def drafts(self, jobs) -> dict:
        """{seq: draft} of one step whose busy slots are `jobs`, (seq, Drafter, k) each (k <= 0: no draft): with
        more than one busy slot, each policy drafter's chain under `offer` and the plan's share of it; a drafter with
        llama.cpp's rule drafts as it would alone (its rows counted, one token expected of it); one busy slot drafts
        as it would alone, by the curve (the one-sequence rule, exactly)."""
        self.start([seq for seq, _, _ in jobs])
        out, chains, planned = {}, {}, len(jobs) > 1
        for seq, drafter, k in jobs:
            out[seq] = drafter.draft(None, k, price=self.offer(k, seq)) if k > 0 else []
            if k > 0 and planned and drafter.policy == "lookupkit":
                chains[seq] = drafter.plan()
            else:
                self.layout[seq] = 1 + len(out[seq])
        if chains:
            by_seq = {seq: drafter for seq, drafter, _ in jobs}
            out.update({seq: by_seq[seq].take(d) for seq, d in self.plan(chains).items()})
        return out


def speedup(n_drafted, n_accepted, cost: VerifyCost | float) -> float | None:
    """Expected speed-up over plain decoding of calls that drafted n_drafted[i] and had n_accepted[i] accepted."""
    cost = cost if isinstance(cost, VerifyCost) else VerifyCost(constant=cost)
    a = np.asarray(n_accepted, dtype=np.int64)
    if not len(a):
        return None
    return float((a + 1).sum() / cost.call_costs(n_drafted).sum())


def break_even(n_drafted, n_accepted) -> float | None:
    """The constant cost per drafted position at which drafting gains nothing (S = 1): accepted / drafted."""
    drafted = int(np.sum(n_drafted))
    return int(np.sum(n_accepted)) / drafted if drafted else None


def speedups(n_drafted, n_accepted) -> dict[str, float | None]:
    """S(C) at each of REPORTED_COSTS, keyed by C as text ("0.25")."""
    return {f"{c:g}": speedup(n_drafted, n_accepted, c) for c in REPORTED_COSTS}


def save_curve(result: dict, path: str | os.PathLike) -> Path:
    """Write a calibration as JSON (atomically)."""
    path = Path(path)
    with atomic_writer(path) as f:
        f.write((json.dumps({**result, "format": FORMAT}, indent=2) + "\n").encode())
    return path


def load_curve(path: str | os.PathLike) -> dict:
    """Read a calibration written by `save_curve` (`lookupkit calibrate -o`); curve keys back to ints."""
    remedy = f"write one with lookupkit calibrate -m MODEL.gguf -o {path}"
    try:
        with open_input(path, "calibration file") as f:
            data = json.loads(f.read().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise FormatError(f"{path} is not a readable calibration JSON file ({exc}); {remedy}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("curve"), dict):
        raise FormatError(f"{path} is not a lookupkit calibration ({FORMAT}); {remedy}")
    try:
        data["curve"] = {int(k): float(v) for k, v in data["curve"].items()}
    except (TypeError, ValueError):
        raise FormatError(f"{path}: its curve is not {{k: cost}} numbers; {remedy}") from None
    if data["curve"].get(0) != 1.0 or any(not 0 < v < math.inf for v in data["curve"].values()):
        raise FormatError(f"{path}: a curve starts at k = 0 with cost 1 and holds positive costs; {remedy}")
    data["raw_s"] = {int(k): v for k, v in data.get("raw_s", {}).items()}
    try:
        data["batch"] = {int(n): {int(r): float(c) for r, c in pts.items()} for n, pts in data.get("batch", {}).items()}
    except (AttributeError, TypeError, ValueError):
        raise FormatError(f"{path}: its batch surface is not {{slots: {{rows: cost}}}} numbers; {remedy}") from None
    if any(n < 1 or len(pts) < 2 or any(r < n or not 0 < c < math.inf for r, c in pts.items())
           for n, pts in data["batch"].items()):
        raise FormatError(f"{path}: a batch surface holds, per slot count n >= 1, two or more rows >= n with positive "
                          f"costs; {remedy}")
    return data
