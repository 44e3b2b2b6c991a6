"""The iteration kernel: plan S iterations of one worker's batch as (steps x rows) arrays.

Every iteration of every worker goes through ``plan`` and ``commit``: the step-by-step path
is a segment of one step, the multi-step fast path a segment of many. Step 0 takes its
shape from the batch scheduler (draft length per row, prefill chunks, KV already made to
fit); later steps decode with the speculation policy's fixed draft length, capped so no row
overshoots its requested output, and a prompt still left in chunks gets what the decode
rows leave of the token budget (the segment then ends where the first such prompt
completes). Acceptance draws are keyed by (request, target step), so any prefix of a
segment equals the same steps run one by one: a worker can commit a segment partly (when a
router or a client needs its state at time t) and plan the rest again.

The rules are written once, in ``kernel_jit.py``, as loops numba compiles; this class binds
them to a worker: what each call reads and writes, and the Python hooks a plug-in runs
through (``execution/plugins.py`` names them in the run's notes):

- pricing: a drafter, cost model or executor the kernel has no data for (a plug-in,
  drafters per class) is priced by ``Executor.price`` between the compiled plan and the
  compiled timing (``_price_hook``: the plug-in's own methods, combined by the kernel's
  ``_combine``);
- step 0: a batch scheduler whose ``shape`` is not fcfs's is asked for it (fcfs's own runs
  the kernel's ``_shape``, through ``shape0``);
- acceptance: a plug-in acceptance model's ``accepted`` runs inside the plan's loop, so
  that worker runs the pure-Python versions of the same functions;
- the ledger: a plug-in ledger's ``add`` is given the committed steps;
- a plug-in drafter's ``verify_width`` is tabulated over every draft length.
"""

from __future__ import annotations

import operator

import numpy as np

from specsim.simulator.execution.plugins import KERNEL_METHODS, foreign
from specsim.simulator.execution.segment import Segment, StepShape
from specsim.simulator.metrics.iteration_log import ITER, ITER_COLUMNS

# iteration-log columns of a scenario that drafts (after ITER_COLUMNS and the KV tiers'):
# per iteration, Segment.spec_alloc and Segment.spec_free summed over the worker's rows
SPEC_ITER_COLUMNS = ("spec_taken_blocks", "spec_freed_blocks")


#: ``simulation.compiled: auto`` runs shorter runs as pure Python unless numba's compiled
#: kernel is already at hand (on disk or in this process): the pure kernel takes about 5 ms
#: per chat request here, numba's first compile about 20 s on an idle 2-core machine (45 s
#: loaded), so a first short run (the README's first command) would wait for a compile
#: worth less than it costs. Same bits either way.
AUTO_MIN_REQUESTS = 3000
_prefer_compiled = False


def prefer_compiled(on: bool = True) -> None:
    """A caller that runs many scenarios in one process (a sweep's worker, the planner)
    compiles whatever the runs' length: the compile pays for itself over the runs."""
    global _prefer_compiled
    _prefer_compiled = bool(on)


def _compiled_at_hand() -> bool:
    """Whether numba's kernel is compiled in this process or cached on disk (numba's index
    files beside the module, or under NUMBA_CACHE_DIR): loading it costs under a second."""
    import os
    import sys
    from pathlib import Path

    kj = sys.modules.get("specsim.simulator.execution.kernel_jit")
    plan = getattr(kj, "_plan", None)
    if plan is not None and getattr(plan, "signatures", None):
        return True
    here = Path(__file__).resolve().parent
    places = [here / "__pycache__"]
    if os.environ.get("NUMBA_CACHE_DIR"):
        places.append(Path(os.environ["NUMBA_CACHE_DIR"]))
    return any(any(p.rglob("kernel_jit.*.nbi")) for p in places if p.is_dir())


def numba_fails() -> str:
    """Why numba, installed, does not load (its LLVM library under a small address-space
    limit, say); empty when it loads or is not installed."""
    import importlib.util

    if importlib.util.find_spec("numba") is None:
        return ""
    from specsim.simulator.execution import numpy_order

    return numpy_order.WHY_NOT if numpy_order.numba is None else ""


def compiled_backend(mode: bool | str, n_requests: int | None = None) -> bool:
    """Whether ``simulation.compiled`` runs the kernel compiled: ``true`` (numba needed),
    ``auto`` (numba installed, and the run long enough to gain from a first compile, or the
    compiled kernel already at hand, or a caller that runs many scenarios), ``false`` (the
    pure-Python versions of the same functions, several times slower; for stepping through
    the kernel in a debugger)."""
    if mode is False:
        return False
    import importlib.util

    if importlib.util.find_spec("numba") is None:
        if mode is True:
            from specsim.errors import ScenarioError

            raise ScenarioError("simulation.compiled: true needs numba (pip install numba), "
                                "which is not installed; use auto or false")
        return False
    why = numba_fails()
    if why:  # installed, but it does not load: the Python source runs (a note says so)
        if mode is True:
            from specsim.errors import ScenarioError

            raise ScenarioError(f"simulation.compiled: true needs numba, which did not load "
                                f"({why}); use auto or false")
        return False
    if mode is True or _prefer_compiled or n_requests is None:
        return True
    return n_requests >= AUTO_MIN_REQUESTS or _compiled_at_hand()


class Kernel:
    """Plans and commits segments for one worker; holds what pricing and sampling need."""

    def __init__(self, table, executor, acceptance, alpha_table, drafter, block_size: int,
                 kv_total: int, compiled: bool | str = "auto") -> None:
        from specsim.simulator.execution import kernel_jit as kj
        from specsim.simulator.speculation import drafters as dr
        from specsim.simulator.speculation.acceptance import AcceptanceModel

        self.t = table
        self.executor = executor
        self.acceptance = acceptance
        self.alpha_table = alpha_table
        self.drafter = drafter
        self.bs = block_size
        self.kv_total = kv_total
        # prefix cache (simulator/kv/prefix_cache.py): ``shared`` = the table's kv_shared
        # column (tokens of each row's KV in shared cache pages, not in its own blocks). The
        # worker sets two limits before each plan (PrefixKV.segment_limits): the blocks the
        # rows may hold in a step of steps 1.. (what locked cached pages leave) and, where
        # evictions must demote, that plus the blocks of rows finished earlier in the
        # segment (their pages are cached, so they compete for the lower tier's room)
        self.shared: np.ndarray | None = None
        self.kv_limit = kv_total
        self.kv_limit_kept: int | None = None
        # speculation metrics: accepted drafts per step per class (0..k), policy decisions
        n_cls = max(int(alpha_table.shape[0]), 1)
        self.accept_hist = np.zeros((n_cls, 65), np.int64) if drafter.name != "none" else None
        self.reason_iterations: dict[int, int] = {}
        self.reason_changes = 0
        self.last_reason: int | None = None
        # hooks: a plug-in acceptance model samples inside the plan's loop (pure Python)
        own = (getattr(type(acceptance), "accepted", None) is AcceptanceModel.accepted
               and not foreign(acceptance, KERNEL_METHODS["acceptance model"]))
        self._accepted = None if own else acceptance.accepted
        self.compiled = compiled_backend(compiled, int(table.n)) and own
        why = numba_fails() if compiled == "auto" else ""
        # the run's notes (Worker.notes): numba installed but not loading
        self.notes = [f"simulation.compiled auto: numba did not load ({why}), so the kernel "
                      "runs as Python source (the same results, about 15x slower)"] if why else []
        self.fn = kj.functions(self.compiled)
        self._kj = kj
        # the verify width of each draft length: a chain (k + 1), a tree's, or a drafter's
        # own ``verify_width`` tabulated over every length
        tree = getattr(drafter, "tree", None)
        if not kj.same(drafter, dr.Drafter, "verify_width") or foreign(drafter, ("verify_width",)):
            self.widths = kj.frozen(drafter.verify_width(np.arange(dr.MAX_DEPTH + 1)),
                                    np.int64)
        elif tree is not None:
            self.widths = kj.frozen(tree.widths, np.int64)
        else:
            self.widths = _EMPTY_I
        self.use_tree = len(self.widths) > 0
        self._pricing = None  # built at the first plan: (args...) or False (the hook)
        self._ledger = None  # (the ledger last asked about, whether it is the built-in one)
        self._commit_static = None  # (ledger, cls_idx, the commit's unchanging arguments)
        self._src = None  # the columns the plan only reads, and their read-only views
        self._ro = ()

    def _read(self, t, shared):
        """Read-only views of what the plan only reads (remade if the table's change)."""
        src = (t.output, t.match_key, t.accept_key, t.cls_idx, t.alpha_scale, shared,
               self.alpha_table)
        if self._src is None or any(map(operator.is_not, src, self._src)):
            self._src = src
            self._ro = tuple(_EMPTY_I if a is None else self._kj.frozen(a) for a in src)
        return self._ro

    # ------------------------------------------------------------------ plan
    def _price_args(self):
        """The executor and drafter as data for the compiled pricing (``Executor.data``),
        or False where the Python pricing hook prices (a plug-in, drafters per class)."""
        if self._pricing is None:
            from specsim.simulator.execution.executor import Executor

            ex = self.executor
            self._pricing = (type(ex) is Executor and self._kj.same(ex, Executor, "price",
                                                                    "data")
                             and ex.data()) or False
        return self._pricing

    def _rows_alpha(self, rows):
        """Drafters per class: each row's conditional alphas from its drafter's profile."""
        d = self.drafter
        if not d.per_class:
            return _EMPTY_F2, False
        from specsim.simulator.speculation.drafters import MAX_DEPTH

        return self._kj.frozen(d.row_alpha(rows, self.t.cls_idx[rows], MAX_DEPTH),
                               np.float64), True

    def plan(self, shape: StepShape, now: float, steps: int, fixed_k: int | None,
             packed: bool = False) -> Segment:
        """Plan up to ``steps`` iterations starting at ``now`` (1 unless ``fixed_k`` is set).
        ``packed`` (the compiled pricing only): the plan as ``_plan_priced`` returns it,
        (rows, pre0, chunking, S, m, Ia, Bo, Iv, F), for the compiled solo loop."""
        chunking = shape.chunking and steps > 1 and fixed_k is not None
        t, d, fn = self.t, self.drafter, self.fn
        rows = shape.rows
        pre0 = shape.prefill
        has_pre = bool(pre0.any())
        S = steps if fixed_k is not None and steps > 1 else 1
        shared = self.shared
        kept = self.kv_limit_kept
        output, match_key, accept_key, cls_idx, alpha_scale, shared_ro, alpha_table = (
            self._read(t, shared))
        row_alpha, use_rows = self._rows_alpha(rows)
        args = (np.asarray(rows, np.int64), np.asarray(shape.k, np.int64),
                np.asarray(shape.chunk, np.int64), np.asarray(pre0, np.bool_),
                np.asarray(shape.completes, np.bool_), S, int(fixed_k or 0), has_pre,
                t.generated, output, t.steps, match_key, accept_key, cls_idx, alpha_scale,
                t.kv_len, t.blocks, shared_ro, shared is not None, int(self.kv_total),
                int(self.kv_limit), int(kept) if kept is not None else 0, kept is not None,
                alpha_table, bool(d.proposes_always), float(d.match_rate), self.widths,
                self.use_tree, int(self.bs), bool(chunking), int(shape.budget),
                t.prefill_target, bool(getattr(t, "hands_off", False)), row_alpha, use_rows)
        pr = self._price_args()
        with _quiet(self.compiled):
            if pr and self._accepted is None:
                S, m, Ia, Bo, Iv, F = fn.plan_priced(*args, float(now), *pr)
                if packed:
                    return rows, pre0, chunking, S, m, Ia, Bo, Iv, F
                (dt, draft, verify, flops, nbytes, dflops, dbytes, tokens, pf_tokens, start,
                 end) = F
            else:
                S, m, Ia, Bo, Iv, ctx, Fa = fn.plan(*args, self._accepted)
                tokens, pf_tokens = Fa[0], Fa[4]
                dt, draft, verify, flops, nbytes, dflops, dbytes = self._price_hook(
                    shape, has_pre, Ia[0], ctx, Fa, Iv[1])
                start, end = np.empty(S), np.empty(S)
                fn.times(float(now), np.asarray(dt, np.float64), start, end)
        return _segment(rows, pre0, chunking, S, m, Ia, Bo, Iv, dt, draft, verify, flops,
                        nbytes, dflops, dbytes, tokens, pf_tokens, start, end)

    def _price_hook(self, shape, has_pre, k, ctx, Fa, seqs):
        """The executor prices the plan (``Executor.price``: the kernel's ``_price`` where it
        has data for the drafter and cost model, else their own Python methods), where the
        kernel has no data for them or samples acceptance in Python: per step (seconds,
        draft s, verify s, FLOPs, bytes, draft FLOPs, bytes)."""
        tokens, qc, csum, logits, pf_tokens, pf_qc, chunks = Fa
        if self.drafter.per_class:  # drafters per class: whose rows these are
            self.drafter.bind(shape.rows, np.where(shape.prefill, shape.chunk, 0)
                              if has_pre else None)
        return self.executor.price(k, ctx, tokens, qc, csum, logits, pf_tokens, pf_qc,
                                   seqs, chunks)

    def shape0(self, run, k, match, fixed_k, budget: int, chunked: bool, kv_free: int):
        """The fcfs step 0 (``kernel_jit._shape``) for ``FcfsScheduler.shape``: ``k`` the
        policy's draft length per decode row, ``match`` their match chances (None: the
        drafter proposes always), ``fixed_k`` the policy's fixed k (None: adaptive). A
        drafter's own ``k_for_width`` (a plug-in's, drafters per class) is asked here."""
        from specsim.simulator.speculation import drafters as dr

        t, d, kj = self.t, self.drafter, self._kj
        ro = self._read(t, self.shared)  # (with a prefix cache: the table's kv_shared)
        ndec = len(k)
        kfw = -1
        if ndec and not kj.same(d, dr.Drafter, "k_for_width"):
            kfw = int(d.k_for_width(int(budget) // ndec))
        use_m = match is not None
        with _quiet(self.compiled):
            return self.fn.shape(
                np.asarray(run, np.int64), t.kv_len, t.prefill_target, ro[0], t.generated,
                t.steps, ro[1], t.blocks, -1 if fixed_k is None else int(fixed_k),
                not use_m, float(d.match_rate), self.widths, self.use_tree, int(budget),
                bool(chunked), int(kv_free), int(self.bs), np.array(k, np.int64), True,
                kj.frozen(np.ascontiguousarray(np.broadcast_to(np.asarray(
                    match, np.float64), (ndec,)))) if use_m else ro[4], use_m, kfw, ro[5],
                self.shared is not None)

    def fused(self, worker):
        """The worker's shape + plan as one compiled call (``_shape_plan_priced``), or None
        where that is not the same as its Python scheduler and kernel: a batch scheduler
        whose step 0 is not fcfs's, a prefix cache, a policy other than static k, a drafter whose match
        chance or widths are its own, drafters per class, or pricing or acceptance through a
        hook. The call returns ``(segment, multi)``, or None when the step's KV growth does
        not fit (the Python scheduler then preempts)."""
        from specsim.simulator.kv.blocks import BlockAllocator
        from specsim.simulator.scheduling.batching import FcfsScheduler
        from specsim.simulator.speculation import drafters as dr
        from specsim.simulator.speculation.policies import StaticK

        d, policy, sch = self.drafter, worker.policy, worker.scheduler
        # fcfs's step 0 (the SLO-tier schedulers, scheduling/priority.py, inherit it: they
        # differ in whom they admit and preempt, both done in Python before and after)
        if not (self._accepted is None and self._price_args()
                and isinstance(sch, FcfsScheduler) and type(sch).shape is FcfsScheduler.shape
                and not foreign(sch, KERNEL_METHODS["batch scheduler"])
                and not foreign(d, KERNEL_METHODS["drafter"])
                and type(worker.kv) is BlockAllocator and worker.cache is None
                and isinstance(policy, StaticK)
                and type(policy).choose is StaticK.choose and policy.fixed_k is not None
                and self._kj.same(d, dr.Drafter, "match_probability", "verify_width",
                                  "k_for_width")
                and not d.per_class
                and not getattr(d, "state_dependent_match", False)):
            return None

        t, kv, fn = self.t, worker.kv, self.fn
        static = None
        read = None  # the _read views ``static`` was built from

        def plan(now: float, steps: int):
            nonlocal static, read
            ro = self._read(t, self.shared)  # the same tuple while the table's columns are
            if ro is not read:
                read = ro
                static = self.fused_static(worker)
            rows = worker.run
            with _quiet(self.compiled):
                fits, multi, pre0, chunking, S, m, Ia, Bo, Iv, F = fn.shape_plan_priced(
                    rows, steps, worker.chunk_segments, kv.total - kv.used, float(now),
                    *static)
            if not fits:
                return None
            return _segment(rows, pre0, chunking, S, m, Ia, Bo, Iv, *F), multi

        return plan

    def fused_static(self, worker) -> tuple:
        """What the fused shape + plan (``_shape_plan_priced``) reads after its first five
        arguments: the policy's k, the scheduler's budget, the table's columns, the drafter
        and the pricing, as data (a worker ``fused`` accepts)."""
        t, d, sch = self.t, self.drafter, worker.scheduler
        output, match_key, accept_key, cls_idx, alpha_scale, shared, alpha_table = self._read(
            t, self.shared)  # (shared: the rows' state offsets, ``state_offsets``, or none)
        return (int(worker.policy.fixed_k), int(sch.token_budget), bool(sch.chunked_prefill),
                t.generated, output, t.steps, match_key, accept_key, cls_idx, alpha_scale,
                t.kv_len, t.blocks, shared, self.shared is not None, int(self.kv_total),
                int(self.kv_total), 0,
                False, alpha_table, bool(d.proposes_always), float(d.match_rate), self.widths,
                self.use_tree, int(self.bs), t.prefill_target,
                bool(getattr(t, "hands_off", False)), _EMPTY_F2, False, *self._price_args())

    # ------------------------------------------------------------------ commit
    def _builtin_ledger(self, ledger) -> bool:
        """The ledger is the built-in ``Ledger`` (the kernel's ``_account`` is its ``add``);
        asked at every commit, answered once per ledger."""
        if self._ledger is None or self._ledger[0] is not ledger:
            from specsim.simulator.execution.ledger import Ledger

            self._ledger = (ledger, type(ledger) is Ledger
                            and self._kj.same(ledger, Ledger, "add", "take")
                            and not foreign(ledger, KERNEL_METHODS["ledger"]))
        return self._ledger[1]

    def commit(self, seg: Segment, upto: int, kv, ledger, metrics, wid: int,
               record: bool) -> np.ndarray:
        """Apply steps [seg.done, upto) to the table, the KV pool and the ledger.

        Returns the rows that finished (they leave the batch).
        """
        a, b = seg.done, upto
        if b <= a:
            return seg.rows[:0]
        n = b - a
        t, rows = self.t, seg.rows
        buf, row0 = metrics.reserve_rows(n) if record else (_NO_BUF, 0)
        cls_idx = self._read(t, self.shared)[3]
        static = self._commit_static
        if static is None or static[0] is not ledger or static[1] is not cls_idx:
            # what stays the same from one commit to the next: the table's columns, the
            # ledger's constants, the histogram
            static = self._commit_static = (ledger, cls_idx, self.commit_args(ledger))
        pre = seg.pre_steps
        chunked = pre is not None
        with _quiet(self.compiled):
            Fo, Io, ng, nf, held_before, held_after, peak = self.fn.commit(
                a, b, np.asarray(rows, np.int64), seg.emit, seg.acc, seg.k, seg.alive,
                seg.kv_add, seg.finishing, seg.after_rows, seg.during, seg.end, seg.dt,
                seg.draft, seg.verify, seg.flops, seg.nbytes, seg.dflops, seg.dbytes,
                seg.pf_tokens, seg.tokens, seg.first0, seg.count0, seg.prefill0, *static[2],
                buf, row0, record, wid, seg.reason, seg.start, chunked,
                pre if chunked else _NO_MASK, seg.first_steps if chunked else _NO_MASK,
                seg.counted if chunked else _NO_MASK)
        g = 2 * n + self._kj.LEDGER_SUMS
        metrics.add_itl(Fo[g:g + ng])
        kv.set_held(int(held_before), int(held_after), int(peak))
        seg.done = b
        if self._builtin_ledger(ledger):  # (_commit added the sums to ledger.sums)
            ledger.take(n)
        else:  # a plug-in ledger accounts the steps itself; its utilisations are logged
            cu, mu = self._ledger_hook(seg, a, b, ledger)
            if record:
                buf[row0:row0 + n, ITER.compute_util] = cu
                buf[row0:row0 + n, ITER.memory_util] = mu
        if a == 0:
            if self.last_reason is not None and seg.reason != self.last_reason:
                self.reason_changes += 1
            self.last_reason = seg.reason
        self.reason_iterations[seg.reason] = self.reason_iterations.get(seg.reason, 0) + n
        if record:  # _commit wrote the rows in place
            metrics.rows_added(n)
        return Io

    def commit_args(self, ledger) -> tuple:
        """``_commit``'s arguments that stay the same from one commit to the next: the
        table's columns, the ledger's constants and running sums (``Ledger.sums``, which
        ``_account`` adds to; none for a plug-in ledger), the accepted-length histogram."""
        t, hist = self.t, self.accept_hist
        return (t.generated, t.accepted, t.bonus, t.drafted, t.steps, t.kv_len, t.blocks,
                t.last_delivery, t.first_token, t.finish,
                bool(self.executor.overlap), int(ledger.devices), float(ledger.peak_flops),
                float(ledger.hbm_bw), getattr(ledger, "power", _NO_POWER),
                ledger.sums if self._builtin_ledger(ledger) else _NO_SUMS,
                hist if hist is not None else _NO_HIST, self._read(t, self.shared)[3],
                hist is not None)

    def _ledger_hook(self, seg: Segment, a: int, b: int, ledger):
        """A plug-in ledger's ``add`` of steps [a, b): (compute, memory utilisation)."""
        sl = slice(a, b)
        alive = seg.alive[sl]
        if seg.pre_steps is not None:
            decoding = alive & ~seg.pre_steps[sl]
        else:
            decoding = alive.copy()
            if a == 0:
                decoding[0] &= ~seg.prefill0
        phase = np.zeros(b - a) if self.executor.overlap else seg.draft[sl]
        return ledger.add(seg.dt[sl], seg.draft[sl], seg.verify[sl], seg.flops[sl],
                          seg.nbytes[sl], phase, seg.dflops[sl], seg.dbytes[sl],
                          seg.k[sl].sum(axis=1).astype(np.float64),
                          seg.acc[sl].sum(axis=1).astype(np.float64),
                          decoding.sum(axis=1).astype(np.float64), seg.pf_tokens[sl],
                          seg.tokens[sl])


class _quiet:
    """The pure-Python kernel's uint64 arithmetic wraps as numba's does; numpy scalars
    would warn of each overflow. (Nothing to do for the compiled kernel.)"""

    __slots__ = ("on", "state")

    def __init__(self, compiled: bool) -> None:
        self.on = not compiled

    def __enter__(self):
        if self.on:
            self.state = np.seterr(over="ignore")

    def __exit__(self, *exc):
        if self.on:
            np.seterr(**self.state)


def _segment(rows, pre0, chunking, S, m, Ia, Bo, Iv, dt, draft, verify, flops, nbytes,
             dflops, dbytes, tokens, pf_tokens, start, end) -> Segment:
    """The Segment of a plan (its packed arrays unpacked, views not copies)."""
    S, m = int(S), int(m)  # (numpy integers from the pure-Python kernel)
    k, acc, emit, kv_add, after_rows = Ia
    seg = Segment(rows, start, end, dt, draft, verify, flops, nbytes, tokens, k, acc,
                  emit, kv_add, Bo[2 * S], Bo[:S], Bo[S:2 * S], Iv[0], after_rows, pre0,
                  Bo[2 * S + 1], m, dflops, dbytes, pf_tokens)
    seg.spec_free, seg.spec_alloc = Iv[2], Iv[3]
    if chunking:
        pre = Bo[2 * S + 2:3 * S + 2]
        if pre[1:].any():  # a prompt went on in chunks past step 0
            seg.pre_steps, seg.first_steps, seg.counted = (pre, Bo[3 * S + 2:4 * S + 2],
                                                           Bo[4 * S + 2:])
    return seg


def state_offsets(n: int, tokens: int) -> np.ndarray:
    """The ``shared`` column of a pool whose every request holds ``tokens`` tokens' worth of
    blocks for its state besides its KV (``Deployment.state_blocks`` x the block size): the
    kernel counts a row's blocks as ceil((kv_len - shared) / block size), so -tokens adds
    the state's blocks to every row's, from admission to its end."""
    return _ro(np.full(n, -int(tokens), np.int64))


def _ro(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


_EMPTY_I = _ro(np.zeros(0, np.int64))
_EMPTY_F2 = _ro(np.zeros((0, 0)))  # no per-row alphas (a single drafter)
_NO_HIST = np.zeros((1, 1), np.int64)
_NO_MASK = np.zeros((1, 1), np.bool_)  # a segment without chunks: its (S, B) masks' stand-in
_NO_BUF = np.zeros((1, len(ITER_COLUMNS)))  # unrecorded: the iteration rows' stand-in
# a plug-in ledger without the built-in's power curve: it accounts its steps itself
_NO_POWER = np.zeros(5)
_NO_POWER.flags.writeable = False
_NO_SUMS = np.zeros(0)  # a plug-in ledger's: _account adds nothing (its add accounts)
