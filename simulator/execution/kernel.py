"""The iteration kernel: plan S iterations of one worker's batch as (steps x rows) arrays.

Every iteration of every worker goes through ``plan_segment`` and ``commit``: the
step-by-step path is a segment of one step, the multi-step fast path a segment of many.
Step 0 takes its shape from the batch scheduler (draft length per row, prefill chunks,
KV already made to fit); later steps decode with the speculation policy's fixed draft
length, capped so no row overshoots its requested output, and a prompt still left in
chunks gets what the decode rows leave of the token budget (``_chunk_steps``; the segment
then ends where the first such prompt completes). Acceptance draws are keyed
by (request, target step), so any prefix of a segment equals the same steps run one by one:
a worker can commit a segment partly (when a router or a client needs its state at time t)
and plan the rest again.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from specsim.cost_models.roofline import attention_area
from specsim.simulator import rng
from specsim.simulator.execution.segment import Segment, StepShape

# iteration-log columns of a scenario that drafts (after ITER_COLUMNS and the KV tiers'):
# per iteration, Segment.spec_alloc and Segment.spec_free summed over the worker's rows
SPEC_ITER_COLUMNS = ("spec_taken_blocks", "spec_freed_blocks")


#: ``simulation.compiled: auto`` compiles only runs at least this long: below it numba's
#: import and cache load (about 0.3 s) cost more than the loop saves (measured: a wash at
#: 1,000 requests of chat or the Azure replay, 0.3 s saved at 2,000; the same bits either way)
AUTO_MIN_REQUESTS = 1500


_many_runs = False  # inside ``many_runs()``


@contextmanager
def many_runs(on: bool = True):
    """Within it, ``simulation.compiled: auto`` compiles runs of any length: a caller that
    runs many scenarios in one process (a sweep's worker, the planner's probes) pays numba's
    fixed cost once and gains on every run after (results are the same bits either way)."""
    global _many_runs
    before, _many_runs = _many_runs, bool(on) or _many_runs
    try:
        yield
    finally:
        _many_runs = before


def _compiled(kernel, mode: bool | str):
    """The compiled kernel for ``simulation.compiled`` (auto: when numba is installed and
    the run is long enough to gain, or is one of many in this process)."""
    if mode is False or (mode == "auto" and kernel.t.n < AUTO_MIN_REQUESTS
                         and not _many_runs):
        return None
    import importlib.util

    if importlib.util.find_spec("numba") is None:
        if mode is True:
            from specsim.errors import ScenarioError

            raise ScenarioError("simulation.compiled: true needs numba (pip install numba), "
                                "which is not installed; use auto or false")
        return None
    from specsim.simulator.execution import kernel_jit

    return kernel_jit.Compiled(kernel)


class Kernel:
    """Plans and commits segments for one worker; holds what pricing and sampling need."""

    def __init__(self, table, executor, acceptance, alpha_table, drafter, block_size: int,
                 kv_total: int, compiled: bool | str = "auto") -> None:
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
        # simulation.compiled: the same plan and commit compiled with numba (kernel_jit.py)
        self._jit = _compiled(self, compiled)

    def plan(self, shape: StepShape, now: float, steps: int, fixed_k: int | None) -> Segment:
        """Plan up to ``steps`` iterations starting at ``now`` (1 unless ``fixed_k`` is set)."""
        chunking = shape.chunking and steps > 1 and fixed_k is not None
        if self._jit is not None and self._jit.plans:
            return self._jit.plan(shape, now, steps, fixed_k, chunking)
        t, rows = self.t, shape.rows
        B = len(rows)
        S = steps if fixed_k is not None and steps > 1 else 1
        pre0, done0 = shape.prefill, shape.completes
        has_pre = bool(pre0.any())  # most segments are pure decode: skip the prefill rules
        # rows whose prompt goes on in chunks after step 0 (a segment through chunks)
        cont = pre0 & ~done0 if chunking else None
        gen0 = t.generated[rows]
        left0 = t.output[rows] - gen0
        if S > 1:
            S = max(min(S, int(left0.max()) + 1), 1)
        # target-step counter of each row at each step (the key of its draws): step 0 counts
        # for decode rows and for a recomputed prefill that completes (it emits a token)
        count0 = ~pre0 | (done0 & (gen0 > 0))
        steps0 = t.steps[rows]
        if S > 1:
            sidx = np.empty((S, B), np.uint64)
            sidx[0] = steps0
            sidx[1:] = (steps0 + count0)[None, :] + np.arange(S - 1)[:, None]
        else:
            sidx = steps0[None, :].astype(np.uint64)
        K = int(fixed_k or 0)
        kfull = np.empty((S, B), np.int64)
        kfull[0] = shape.k
        if S > 1:
            kfull[1:] = K
            if not self.drafter.proposes_always and K > 0:
                um = rng.uniform(t.match_key[rows][None, :], sidx[1:])
                kfull[1:] = np.where(um <= self.drafter.match_rate, K, 0)
        if cont is not None and S > 1 and cont.any():
            kfull[1:, cont] = 0  # a prefilling row drafts nothing
        else:
            cont = None
        kmax = int(kfull.max()) if kfull.size else 0
        if kmax > 0:
            if self.drafter.per_class:  # drafters per class: each row's own
                cond = self.drafter.row_alpha(rows, t.cls_idx[rows], kmax)  # (uncompiled)
            else:
                cond = np.minimum(self.alpha_table[t.cls_idx[rows], :kmax]
                                  * t.alpha_scale[rows, None], 1.0)
            u = rng.uniform(t.accept_key[rows][None, :], sidx)  # (S, B)
            afull = self.acceptance.accepted(u, cond, kfull)
        else:
            afull = np.zeros((S, B), np.int64)
        efull = afull + 1
        if has_pre:
            efull[0] = np.where(pre0, done0, efull[0])

        def emissions():  # tokens each row may emit per step, given ``efull``
            before = np.minimum(np.cumsum(efull, axis=0) - efull, left0[None, :])
            left = left0[None, :] - before
            alive = left > 0  # a finished row leaves the batch: no tokens, no KV after its end
            k = np.minimum(kfull, np.maximum(left - 1, 0))
            return left, alive, k, np.minimum(afull, k)

        left, alive, k, acc = emissions()
        pre = ch = comp = None
        last = S - 1  # the last step a chunked segment may run (where a prompt completes)
        if cont is not None:  # the chunk schedule from the decode rows' widths, then again
            q = np.where(alive, self.drafter.verify_width(k), 0)
            pre, ch, comp, last = self._chunk_steps(shape, cont, q, S)
            efull[1:, cont] = comp[1:, cont]  # the completing chunk emits one token
            left, alive, k, acc = emissions()
        emit = np.where(alive, acc + 1, 0)
        q = np.where(alive, self.drafter.verify_width(k), 0)
        if pre is not None:
            emit = np.where(pre, comp, emit)
            q = np.where(pre, ch, q)
            kv_add = np.where(pre, ch, emit)
        else:
            if has_pre:
                emit[0] = np.where(pre0, done0, emit[0])
                q[0] = np.where(pre0, shape.chunk, q[0])
            kv_add = emit.copy()
            if has_pre:
                kv_add[0] = np.where(pre0, shape.chunk, emit[0])
        finishing = alive & (left == emit)
        n_alive = alive.sum(axis=1)
        ok = n_alive > 0  # once every row is done the worker idles
        # KV: blocks held before each step, needed during it, kept after it (0 once done)
        bs = self.bs
        kvb = t.kv_len[rows][None, :] + np.cumsum(kv_add, axis=0) - kv_add
        kvp = kvb if self.shared is None else kvb - self.shared[rows][None, :]
        need = -(-(kvp + q) // bs)
        held = -(-kvp // bs)
        blocks0 = t.blocks[rows]
        held[0] = blocks0
        if S > 1 and has_pre:  # a prefill keeps its reserve
            held[1] = np.where(pre0, np.maximum(blocks0, need[0]), held[1])
        if pre is not None:  # ... through its chunks: each step holds what the last did
            cc = np.flatnonzero(cont)
            kept_c = np.maximum.accumulate(
                np.maximum(need[:last + 1, cc], blocks0[cc][None, :]), axis=0)
            held[1:last + 1, cc] = kept_c[:-1]
        during_rows = np.where(alive, np.maximum(held, need), 0)
        after_rows = np.minimum(during_rows, -(-(kvp + kv_add) // bs))
        if pre is not None:
            after_rows = np.where(pre, during_rows, after_rows)
        elif has_pre:
            after_rows[0] = np.where(pre0, during_rows[0], after_rows[0])
        after_rows[finishing] = 0
        during = during_rows.sum(axis=1)
        if S > 1:
            if self.shared is None:
                ok[1:] &= during[1:] <= self.kv_total
            else:
                ok[1:] &= during[1:] <= self.kv_limit
                if self.kv_limit_kept is not None:
                    kept = np.cumsum(np.where(finishing, during_rows, 0).sum(axis=1))
                    ok[1:] &= during[1:] + kept[:-1] <= self.kv_limit_kept
        # price every step: drafting + one verification pass over every row's q tokens
        ctx = np.where(alive, kvb, 0).astype(np.float64)
        qf = q.astype(np.float64)
        tokens = qf.sum(axis=1)
        area = attention_area(qf, ctx)
        qc = area.sum(axis=1)
        csum = ctx.sum(axis=1)
        logits = tokens.copy()
        pf_tokens = np.zeros(S)
        pf_qc = np.zeros(S)
        if pre is not None:  # token counts: exact in any order of summation
            pf_tokens = np.where(pre, qf, 0.0).sum(axis=1)
            pf_qc = np.where(pre, area, 0.0).sum(axis=1)
            logits = tokens - pf_tokens + (pre & comp).sum(axis=1)
        elif has_pre:
            pf_tokens[0] = float(qf[0, pre0].sum())
            pf_qc[0] = float(area[0, pre0].sum())
            logits[0] = tokens[0] - pf_tokens[0] + float((done0 & pre0).sum())
        seqs = (q > 0).sum(axis=1)
        chunks = np.zeros(S)
        if pre is not None:
            chunks = (pre & (q > 0)).sum(axis=1).astype(np.float64)
        elif has_pre:
            chunks[0] = float((pre0 & (q[0] > 0)).sum())
        if self.drafter.per_class:  # drafters per class: whose rows these are
            self.drafter.bind(rows, np.where(pre0, q[0], 0) if has_pre else None)
        dt, draft, verify, flops, nbytes, dflops, dbytes = self.executor.price(
            k, ctx, tokens, qc, csum, logits, pf_tokens, pf_qc, seqs, chunks)
        end = now + np.cumsum(dt)
        start = end - dt
        m = int(np.argmin(ok)) if not ok.all() else S
        if pre is not None:
            m = min(m, last + 1)
            if getattr(t, "hands_off", False):  # finished rows move on (PD prefill pool)
                fin = np.flatnonzero(finishing[:m].any(axis=1))
                if len(fin):
                    m = int(fin[0]) + 1
        seg = Segment(rows, start, end, dt, draft, verify, flops, nbytes, tokens, k, acc, emit,
                      kv_add, count0, alive, finishing, during, after_rows, pre0,
                      pre0 & done0 & (gen0 == 0), max(m, 1), dflops, dbytes, pf_tokens)
        # speculative KV, over rows that draft (k > 0) and go on (a finishing row frees
        # everything): the blocks each step took for its draft + bonus tokens, and those of
        # rejected drafts, returned after the step
        dec = alive & ~finishing & (k > 0)
        if pre is not None:
            dec &= ~pre
        elif has_pre:
            dec[0] &= ~pre0
        # (a block held before the step, e.g. admission's spare one, is not a draft's)
        seg.spec_free = np.where(dec, np.maximum(during_rows - np.maximum(after_rows, held), 0),
                                 0).sum(axis=1)
        seg.spec_alloc = np.where(dec, during_rows - held, 0).sum(axis=1)
        if pre is not None:
            done = pre & comp
            seg.pre_steps = pre
            seg.first_steps = done & (gen0 == 0)[None, :]
            # a target step: decoding, or a recomputed prompt completing (it emits a token)
            seg.counted = alive & (~pre | (done & (gen0 > 0)[None, :]))
        return seg

    def _chunk_steps(self, shape: StepShape, cont: np.ndarray, q: np.ndarray, S: int):
        """Prefill chunks of steps 1.. for the rows in ``cont`` (prompts not finished in
        step 0), as the batch scheduler would give them: each step's budget less the decode
        rows' tokens (``q``, their verify widths), in admission order. The first such row
        takes all of it until its prompt completes in step ``last``; there the others get
        what it leaves. Returns the (S, B) masks of prefilling and completing rows, the
        chunks and ``last`` (S - 1 when no prompt completes within S steps)."""
        t, rows = self.t, shape.rows
        B = len(rows)
        cc = np.flatnonzero(cont)
        rem = (t.prefill_target[rows] - t.kv_len[rows] - shape.chunk)[cc]  # after step 0
        room = np.maximum(shape.budget - np.where(cont[None, :], 0, q[1:]).sum(axis=1), 0)
        cum = np.cumsum(room)
        j = int(np.searchsorted(cum, rem[0], side="left"))  # step j + 1 completes the first
        last = j + 1 if j < S - 1 else S - 1
        ch = np.zeros((S, B), np.int64)
        ch[0] = shape.chunk
        ch[1:last + 1, cc[0]] = room[:last]
        pre = np.zeros((S, B), bool)
        pre[0] = shape.prefill
        pre[1:last + 1, cc] = True
        comp = np.zeros((S, B), bool)
        comp[0] = shape.prefill & shape.completes
        if j < S - 1:
            rem[0] -= int(cum[j - 1]) if j else 0  # what the first has left in step last
            ch[last, cc[0]] = rem[0]
            left = int(room[j]) - int(rem[0])
            others = rem[1:]
            ch[last, cc[1:]] = np.minimum(np.maximum(left - (np.cumsum(others) - others), 0),
                                          others)
            comp[last, cc] = ch[last, cc] >= rem
        return pre, ch, comp, last

    def commit(self, seg: Segment, upto: int, kv, ledger, metrics, wid: int,
               record: bool) -> np.ndarray:
        """Apply steps [seg.done, upto) to the table, the KV pool and the ledger.

        Returns the rows that finished (they leave the batch).
        """
        a, b = seg.done, upto
        if b <= a:
            return seg.rows[:0]
        if self._jit is not None and self._jit.commits(ledger):
            return self._jit.commit(seg, upto, kv, ledger, metrics, wid, record)
        pre = seg.pre_steps  # a segment through prefill chunks (first tokens and gaps may
        # fall in later steps)
        t, rows = self.t, seg.rows
        sl = slice(a, b)
        emit, alive, end = seg.emit[sl], seg.alive[sl], seg.end[sl]
        delivered = emit > 0
        # inter-token gaps: step a from each row's last delivery, later steps from the step
        # before (a prompt completing in a later step: its first token has no gap, and a
        # recomputed one's runs from its last delivery before the preemption)
        if pre is None:
            first_a = seg.first0 if a == 0 else np.zeros(len(rows), bool)
        else:
            first_a = seg.first_steps[a]
        gaps0 = delivered[0] & ~first_a
        metrics.add_itl(end[0] - t.last_delivery[rows[gaps0]])
        if b - a > 1 and pre is None:
            metrics.add_itl(np.repeat(seg.dt[a + 1:b], delivered[1:].sum(axis=1)))
        elif b - a > 1:
            for s in range(1, b - a):
                own = delivered[s] & pre[a + s]  # a prompt's completing chunk
                metrics.add_itl(np.repeat(seg.dt[a + s], int((delivered[s] & ~own).sum())))
                back = own & ~seg.first_steps[a + s]
                if back.any():
                    metrics.add_itl(end[s] - t.last_delivery[rows[back]])
        if pre is not None:
            si, ri = np.nonzero(seg.first_steps[sl])
            t.first_token[rows[ri]] = end[si]
        elif a == 0 and seg.first0.any():
            t.first_token[rows[seg.first0]] = end[0]
        t.generated[rows] += emit.sum(axis=0)
        t.accepted[rows] += seg.acc[sl].sum(axis=0)
        t.bonus[rows] += delivered.sum(axis=0)
        t.drafted[rows] += seg.k[sl].sum(axis=0)
        if pre is not None:
            steps = seg.counted[sl].sum(axis=0)
        else:
            steps = alive.sum(axis=0)
            if a == 0:
                steps -= alive[0] & ~seg.count0
        t.steps[rows] += steps
        t.kv_len[rows] += seg.kv_add[sl].sum(axis=0)
        t.last_delivery[rows[delivered[-1]]] = end[-1]
        after = seg.after_rows[b - 1]
        kv.set_held(int(t.blocks[rows].sum()), int(after.sum()), int(seg.during[sl].max()))
        t.blocks[rows] = after
        fin_steps = seg.finishing[sl]
        fin = fin_steps.any(axis=0)
        finished = rows[fin]
        if len(finished):
            t.finish[finished] = end[np.argmax(fin_steps[:, fin], axis=0)]
            t.last_delivery[finished] = t.finish[finished]
        seg.done = b
        dt = seg.dt[sl]
        k, acc = seg.k[sl], seg.acc[sl]
        if pre is not None:
            decoding = alive & ~pre[sl]
        else:
            decoding = alive.copy()
            if a == 0:
                decoding[0] &= ~seg.prefill0
        drafted = k.sum(axis=1).astype(np.float64)
        accepted = acc.sum(axis=1).astype(np.float64)
        overlap = self.executor.overlap  # a draft phase hidden under the verify pass has no
        draft_phase = np.zeros_like(dt) if overlap else seg.draft[sl]  # time of its own
        cu, mu = ledger.add(dt, seg.draft[sl], seg.verify[sl], seg.flops[sl], seg.nbytes[sl],
                            draft_phase, seg.dflops[sl], seg.dbytes[sl], drafted, accepted,
                            decoding.sum(axis=1).astype(np.float64), seg.pf_tokens[sl],
                            seg.tokens[sl])
        if self.accept_hist is not None and drafted.any():  # accepted lengths per class
            used = k > 0
            cls = np.broadcast_to(t.cls_idx[rows], k.shape)[used]
            np.add.at(self.accept_hist, (cls, acc[used]), 1)
        if a == 0:
            if self.last_reason is not None and seg.reason != self.last_reason:
                self.reason_changes += 1
            self.last_reason = seg.reason
        self.reason_iterations[seg.reason] = self.reason_iterations.get(seg.reason, 0) + b - a
        if record:
            n_alive = alive.sum(axis=1)
            n_pre = np.zeros(b - a, np.int64)
            if pre is not None:
                n_pre = pre[sl].sum(axis=1)
            elif a == 0:
                n_pre[0] = int(seg.prefill0.sum())
            metrics.add_iterations(
                b - a, time_s=seg.start[sl], worker=wid, batch_size=n_alive,
                decode_seqs=n_alive - n_pre, prefill_seqs=n_pre, tokens=seg.tokens[sl],
                drafted_tokens=seg.k[sl].sum(axis=1), draft_time_s=seg.draft[sl],
                verify_time_s=seg.verify[sl], compute_util=cu, memory_util=mu,
                kv_blocks_used=seg.after_rows[sl].sum(axis=1), policy_reason=seg.reason)
        return finished
