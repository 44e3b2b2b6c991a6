"""A worker: one tensor-parallel group running continuous batching with speculation.

One SimPy process per worker, one event per iteration (DESIGN.md). An iteration: admit from
the queue, pick draft lengths, give decode rows k+1 tokens and prefill rows chunks of the
remaining token budget, grow KV (preempting the newest rows if blocks run out), price draft +
verify, wait that long, then sample acceptance for the whole batch at once and commit.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from . import requests as rq
from . import rng

if TYPE_CHECKING:  # pragma: no cover
    from .engine import Simulation


@dataclass(frozen=True)
class SchedulerConfig:
    max_batch: int
    token_budget: int
    chunked_prefill: bool
    max_queue: int | None


class Worker:
    """Owns its running batch (row indices), waiting queue and KV allocator."""

    def __init__(self, wid: int, sim: Simulation, kv_blocks: int) -> None:
        from .kv import BlockAllocator

        self.wid, self.sim = wid, sim
        self.env = sim.env
        self.sched: SchedulerConfig = sim.sched
        self.kv = BlockAllocator(kv_blocks, sim.block_size)
        self.run = np.zeros(0, np.int64)
        self.waiting: deque[int] = deque()
        self.wake = None
        self.busy_s = 0.0
        self.energy_j = 0.0  # busy energy of the group (all tp devices)
        self.draft_s = 0.0
        self.verify_s = 0.0
        self.iterations = 0
        self.preemptions = 0
        self._last_dt = 0.0
        self.process = self.env.process(self.loop())

    # ------------------------------------------------------------------ queueing
    @property
    def load(self) -> int:
        return len(self.run) + len(self.waiting)

    def submit(self, rid: int) -> None:
        t = self.sim.table
        t.status[rid] = rq.QUEUED
        t.worker[rid] = self.wid
        self.waiting.append(rid)
        if self.wake is not None and not self.wake.triggered:
            self.wake.succeed()

    def _admit(self) -> None:
        t, kv = self.sim.table, self.kv
        room = self.sched.max_batch - len(self.run)
        if room <= 0 or not self.waiting:
            return
        new = []
        while self.waiting and room > 0:
            rid = self.waiting[0]
            need = int(kv.blocks_for(int(t.prefill_target[rid]))) + 1
            if need > kv.free:
                break
            self.waiting.popleft()
            kv.allocate(need)
            t.blocks[rid] = need
            t.status[rid] = rq.RUNNING
            new.append(rid)
            room -= 1
        if new:
            self.run = np.concatenate([self.run, np.array(new, np.int64)])

    # ------------------------------------------------------------------ the loop
    def loop(self):
        env, sim = self.env, self.sim
        while True:
            self._admit()
            if not len(self.run):
                self.wake = env.event()
                yield self.wake
                self.wake = None
                continue
            fast = self._fast_plan() if sim.fast_path else None
            if fast is not None:
                yield env.timeout(fast["end"] - env.now)
                self._fast_commit(fast)
                continue
            plan = self._plan()
            dt = plan["time"]
            yield env.timeout(dt)
            self._commit(plan)
            if sim.horizon is not None and env.now >= sim.horizon:
                return

    def _plan(self) -> dict:
        sim, t, kv = self.sim, self.sim.table, self.kv
        run = self.run
        kvlen = t.kv_len[run]
        target = t.prefill_target[run]
        decoding = kvlen >= target
        dec = run[decoding]
        pre = run[~decoding]
        budget = self.sched.token_budget

        # draft lengths: policy, capped so no step can overshoot the requested output
        k = sim.controller.choose(len(dec))
        left = t.output[dec] - t.generated[dec]
        k = np.minimum(k, np.maximum(left - 1, 0))
        if not sim.drafter.proposes_always and len(dec):
            u = rng.uniform(t.match_key[dec], t.steps[dec].astype(np.uint64))
            k = np.where(u <= sim.drafter.match_rate, k, 0)
        q_dec = k + 1
        dec_tokens = int(q_dec.sum())
        if dec_tokens > budget and len(dec):  # shrink drafts to fit the budget
            per = max(budget // len(dec) - 1, 0)
            k = np.minimum(k, per)
            q_dec = k + 1
            dec_tokens = int(q_dec.sum())
        # prefill chunks from what the budget has left, in admission order
        room = max(budget - dec_tokens, 0)
        rem = (target - kvlen)[~decoding]
        if self.sched.chunked_prefill:
            before = np.cumsum(rem) - rem
            chunk = np.clip(room - before, 0, rem)
        else:
            fits = np.cumsum(rem) <= room
            fits[:1] |= len(dec) == 0  # a lone long prompt still runs
            chunk = np.where(fits, rem, 0)
        # KV growth for this step's writes; preempt the newest rows if blocks run out
        ctx_dec = t.kv_len[dec]
        need_dec = kv.blocks_for(ctx_dec + q_dec) - t.blocks[dec]
        grow = int(np.maximum(need_dec, 0).sum())
        if grow > kv.free:
            self._preempt(grow - kv.free)
            return self._plan()
        if grow:
            kv.allocate(grow)
            t.blocks[dec] += np.maximum(need_dec, 0)

        # price: drafting, then one target pass verifying k+1 tokens of every decode row
        # together with the prefill chunks
        ctx_pre = kvlen[~decoding]
        pf = chunk.astype(np.float64)
        prefill_tokens = float(pf.sum())
        prefill_qc = float((pf * ctx_pre + pf * (pf + 1) / 2).sum())
        spec = k > 0
        draft = sim.drafter.cost(k[spec], ctx_dec[spec].astype(np.float64),
                                 prefill_tokens if sim.drafter_prefills else 0.0,
                                 prefill_qc if sim.drafter_prefills else 0.0)
        qd = q_dec.astype(np.float64)
        completing = int((chunk >= rem).sum()) if len(pre) else 0
        tokens = float(qd.sum()) + prefill_tokens
        qc = float((qd * ctx_dec + qd * (qd + 1) / 2).sum()) + prefill_qc
        ctx_sum = float(ctx_dec.sum() + ctx_pre.sum())
        logits = float(qd.sum()) + completing
        verify, vflops, vbytes = sim.target.scalar(tokens, qc, ctx_sum, logits)
        if sim.overlap_draft:
            dt = max(draft.time_s, verify)
        else:
            dt = draft.time_s + verify
        return {"time": dt, "dec": dec, "k": k, "pre": pre, "chunk": chunk, "rem": rem,
                "draft": draft.time_s, "verify": verify, "tokens": tokens,
                "flops": vflops + draft.flops, "bytes": vbytes + draft.bytes}

    def _preempt(self, blocks_short: int) -> None:
        """Recompute-style preemption: free the newest rows' KV and requeue them first."""
        t, kv = self.sim.table, self.kv
        keep = list(self.run)
        freed = 0
        victims = []
        while keep and freed < blocks_short:
            rid = keep.pop()
            freed += int(t.blocks[rid])
            victims.append(rid)
        for rid in victims:  # newest first back to the queue front, oldest ends up first
            kv.release(int(t.blocks[rid]))
            t.blocks[rid] = 0
            t.kv_len[rid] = 0
            t.prefill_target[rid] = t.prompt[rid] + t.generated[rid]
            t.preemptions[rid] += 1
            t.status[rid] = rq.QUEUED
            self.waiting.appendleft(rid)
        self.preemptions += len(victims)
        self.run = np.array(keep, np.int64)

    def _commit(self, plan: dict) -> None:
        sim, t, kv, now = self.sim, self.sim.table, self.kv, self.env.now
        dec, k, pre, chunk = plan["dec"], plan["k"], plan["pre"], plan["chunk"]
        # decode rows: accepted drafts from one keyed draw per row, plus the bonus token
        if len(dec):
            steps = t.steps[dec]
            acc = np.zeros(len(dec), np.int64)
            spec = k > 0
            if spec.any():
                rows = dec[spec]
                kmax = int(k[spec].max())
                cond = np.minimum(sim.alpha_table[t.cls_idx[rows], :kmax]
                                  * t.alpha_scale[rows, None], 1.0)
                u = rng.uniform(t.accept_key[rows], steps[spec].astype(np.uint64))
                acc[spec] = sim.acceptance.accepted(u, cond, k[spec])
            emitted = acc + 1
            gaps = now - t.last_delivery[dec]
            sim.metrics.add_itl(gaps)
            t.generated[dec] += emitted
            t.accepted[dec] += acc
            t.bonus[dec] += 1
            t.drafted[dec] += k
            t.steps[dec] = steps + 1
            t.kv_len[dec] += emitted
            t.last_delivery[dec] = now
            # roll back KV blocks of rejected drafts
            need = kv.blocks_for(t.kv_len[dec])
            extra = t.blocks[dec] - need
            freed = int(np.maximum(extra, 0).sum())
            if freed:
                kv.release(freed)
                t.blocks[dec] = np.minimum(t.blocks[dec], need)
        # prefill rows: chunks land in KV; a completed prefill emits one token
        if len(pre):
            t.kv_len[pre] += chunk
            done = t.kv_len[pre] >= t.prefill_target[pre]
            if done.any():
                rows = pre[done]
                first = t.generated[rows] == 0
                t.first_token[rows[first]] = now
                again = rows[~first]  # recomputed after preemption: a delivery too
                if len(again):
                    sim.metrics.add_itl(now - t.last_delivery[again])
                    t.steps[again] += 1  # a target step that emitted one token
                t.generated[rows] += 1
                t.bonus[rows] += 1
                t.last_delivery[rows] = now
        # finished rows leave the batch and free their KV
        run = self.run
        fin = t.generated[run] >= t.output[run]
        if fin.any():
            rows = run[fin]
            t.finish[rows] = now
            t.status[rows] = rq.DONE
            kv.release(int(t.blocks[rows].sum()))
            t.blocks[rows] = 0
            self.run = run[~fin]
            sim.on_finish(len(rows))
        # accounting
        dt = plan["time"]
        self._last_dt = dt
        self.iterations += 1
        self.busy_s += dt
        self.draft_s += plan["draft"]
        self.verify_s += plan["verify"]
        if dt > 0:
            cu = plan["flops"] / (dt * sim.peak_flops)
            mu = plan["bytes"] / (dt * sim.hbm_bw)
            util = min(max(cu, mu), 1.0)
            self.energy_j += sim.tp * dt * (sim.power_idle + (sim.power_max - sim.power_idle) * util)
        else:
            cu = mu = 0.0
        if sim.record_iterations:
            sim.metrics.add_iteration(now - dt, self.wid, len(run), len(dec), len(pre),
                                      plan["tokens"], int(k.sum()), plan["draft"], plan["verify"],
                                      cu, mu, kv.used)

    # ------------------------------------------------------------------ fast path
    FAST_STEPS = 256

    def _fast_plan(self) -> dict | None:
        """Advance the batch many iterations at once (DESIGN.md, "The hot path").

        Valid while nothing can change the batch: no queue, KV fits, the next arrival and the
        horizon not reached; prompts admitted just now may join if they all complete in the
        first step (one chunk each). The segment ends with the first step in which a row
        finishes. Near its end a row's k is capped at (tokens left - 1); with survival-curve
        sampling the capped accepted count is min(drawn, cap), so generated tokens follow
        min(cumulative emits, requested) in closed form. Acceptance draws are keyed by
        (request, step): tokens, steps and acceptances equal the step-by-step loop's, and
        times agree to floating-point rounding.
        """
        sim, t = self.sim, self.sim.table
        if self.waiting or not len(self.run):
            return None
        run = self.run
        kv0 = t.kv_len[run]
        rem0 = t.prefill_target[run] - kv0
        pre = rem0 > 0  # prompts to prefill in step 0
        if pre.any() and (t.generated[run][pre] > 0).any():
            return None  # recomputation after preemption: the step-by-step path handles it
        K = sim.controller.k
        B = len(run)
        if B * (K + 1) > self.sched.token_budget:
            return None
        left0 = t.output[run] - t.generated[run]
        room = int(left0.max()) + 1  # every row has finished by then
        ahead = sim.next_arrival_time(self.wid) - self.env.now
        if self._last_dt > 0 and ahead < float("inf"):
            room = min(room, int(ahead / self._last_dt) + 1)
        S = max(min(self.FAST_STEPS, room), 2)
        steps = np.arange(S)[:, None]
        sidx = (t.steps[run][None, :] + steps - pre[None, :]).astype(np.uint64)
        if K > 0:
            kfull = np.full((S, B), K, np.int64)
            if not sim.drafter.proposes_always:
                um = rng.uniform(t.match_key[run][None, :], sidx)
                kfull = np.where(um <= sim.drafter.match_rate, kfull, 0)
            cond = np.minimum(sim.alpha_table[t.cls_idx[run], :K] * t.alpha_scale[run, None], 1.0)
            surv = np.cumprod(cond, axis=1)  # (B, K)
            u = rng.uniform(t.accept_key[run][None, :], sidx)  # (S, B)
            afull = np.minimum((u[:, :, None] <= surv[None, :, :]).sum(axis=2), kfull)
            kfull[0, pre] = 0
            afull[0, pre] = 0
        else:
            kfull = afull = np.zeros((S, B), np.int64)
        cum_full = np.cumsum(afull + 1, axis=0)
        before = np.minimum(cum_full - afull - 1, left0[None, :])  # emitted before step s
        left = left0[None, :] - before
        alive = left > 0  # a finished row leaves the batch: no tokens, no KV after its end
        k = np.minimum(kfull, np.maximum(left - 1, 0))
        acc = np.minimum(afull, k)
        emit = np.where(alive, acc + 1, 0)
        q = np.where(alive, k + 1, 0)
        q[0] = np.where(pre, rem0, q[0])
        kv_add = emit.copy()
        kv_add[0] = np.where(pre, rem0, emit[0])
        n_pre = int(pre.sum())
        if n_pre:
            room0 = self.sched.token_budget - int(q[0][~pre].sum())
            if int(rem0[pre].sum()) > room0:
                return None  # the prompts need more than one chunk
        finishing = alive & (left == emit)
        n_alive = alive.sum(axis=1)
        ok = n_alive > 0  # once every row is done the worker idles
        if not sim.arrivals_planned:
            # a load-reading router sees finishes when it routes: end at the first finish
            fin_any = finishing.any(axis=1)
            if fin_any.any():
                ok[int(np.argmax(fin_any)) + 1:] = False
        # KV: blocks held before each step, needed during it, kept after it (0 once done)
        bs = self.kv.block_size
        kvb = kv0[None, :] + np.cumsum(kv_add, axis=0) - kv_add
        need = -(-(kvb + q) // bs)
        held = -(-kvb // bs)
        held[0] = t.blocks[run]
        held[1, pre] = np.maximum(t.blocks[run][pre], need[0, pre])  # prefill keeps its reserve
        during_rows = np.where(alive, np.maximum(held, need), 0)
        after_rows = np.minimum(during_rows, -(-(kvb + kv_add) // bs))
        after_rows[0, pre] = during_rows[0, pre]
        after_rows[finishing] = 0
        ok &= during_rows.sum(axis=1) <= self.kv.total
        # price every step: drafting + one verification pass of every row's q tokens
        ctx = np.where(alive, kvb, 0).astype(np.float64)
        qf = q.astype(np.float64)
        tokens = qf.sum(axis=1)
        qc = (qf * ctx + qf * (qf + 1) / 2).sum(axis=1)
        csum = ctx.sum(axis=1)
        logits = tokens.copy()
        pf_tokens = np.zeros(S)
        pf_qc = np.zeros(S)
        if n_pre:
            pf_tokens[0] = float(qf[0, pre].sum())
            pf_qc[0] = float((qf[0, pre] * ctx[0, pre] + qf[0, pre] * (qf[0, pre] + 1) / 2).sum())
            logits[0] = tokens[0] - pf_tokens[0] + n_pre
        vt, vf, vb = sim.target.time_and_work(tokens, qc, csum, logits)
        if sim.drafter_prefills:
            dtt, dtf, dtb = sim.drafter.cost_steps(k, ctx, pf_tokens, pf_qc)
        else:
            dtt, dtf, dtb = sim.drafter.cost_steps(k, ctx)
        dt = np.maximum(dtt, vt) if sim.overlap_draft else dtt + vt
        end = self.env.now + np.cumsum(dt)
        start = end - dt
        ok &= start < sim.next_arrival_time(self.wid)
        if sim.horizon is not None:
            ok &= end < sim.horizon
        m = int(np.argmin(ok)) if not ok.all() else S
        self._last_dt = float(dt[-1])
        if m < 1:
            return None
        last = m - 1
        return {"m": m, "k": k[:m], "acc": acc[:m], "emit": before[last] + emit[last],
                "kv_add": (kvb[last] + kv_add[last]) - kv0, "pre": pre, "n_pre": n_pre,
                "dt": dt[:m], "start": start[:m], "end": float(end[last]), "draft": dtt[:m],
                "verify": vt[:m], "flops": vf[:m] + dtf[:m], "bytes": vb[:m] + dtb[:m],
                "tokens": tokens[:m], "during": during_rows[:m].sum(axis=1),
                "after_rows": after_rows[last], "after": after_rows[:m].sum(axis=1),
                "alive": alive[:m], "n_alive": n_alive[:m], "finishing": finishing[:m]}

    def _fast_commit(self, f: dict) -> None:
        sim, t, kv, now = self.sim, self.sim.table, self.kv, self.env.now
        run, m, pre, alive = self.run, f["m"], f["pre"], f["alive"]
        dt = f["dt"]
        end = f["start"] + dt
        if f["n_pre"]:
            t.first_token[run[pre]] = end[0]
            sim.metrics.add_itl(end[0] - t.last_delivery[run[~pre]])
        else:
            sim.metrics.add_itl(end[0] - t.last_delivery[run])
        if m > 1:
            sim.metrics.add_itl(np.repeat(dt[1:], f["n_alive"][1:]))
        live_steps = alive.sum(axis=0)
        t.generated[run] += f["emit"]
        t.accepted[run] += f["acc"].sum(axis=0)
        t.bonus[run] += live_steps
        t.drafted[run] += f["k"].sum(axis=0)
        t.steps[run] += live_steps - pre
        t.kv_len[run] += f["kv_add"]
        t.last_delivery[run] = now
        held = int(t.blocks[run].sum())
        t.blocks[run] = f["after_rows"]
        kv.used += int(f["after_rows"].sum()) - held
        kv.peak = max(kv.peak, int(f["during"].max()), kv.used)
        fin_steps = f["finishing"]
        fin = fin_steps.any(axis=0)
        if fin.any():
            rows = run[fin]
            t.finish[rows] = end[np.argmax(fin_steps[:, fin], axis=0)]
            t.last_delivery[rows] = t.finish[rows]
            t.status[rows] = rq.DONE
            self.run = run[~fin]
            sim.on_finish(len(rows))
        self._last_dt = float(dt[-1])
        self.iterations += m
        self.busy_s += float(dt.sum())
        self.draft_s += float(f["draft"].sum())
        self.verify_s += float(f["verify"].sum())
        cu = f["flops"] / (dt * sim.peak_flops)
        mu = f["bytes"] / (dt * sim.hbm_bw)
        util = np.minimum(np.maximum(cu, mu), 1.0)
        self.energy_j += sim.tp * float((dt * (sim.power_idle
                                               + (sim.power_max - sim.power_idle) * util)).sum())
        if sim.record_iterations:
            n_pre = f["n_pre"]
            first = np.arange(m) == 0
            n_alive = f["n_alive"]
            sim.metrics.add_iterations(
                f["start"], self.wid, n_alive, np.where(first, n_alive - n_pre, n_alive),
                np.where(first, n_pre, 0), f["tokens"], f["k"].sum(axis=1), f["draft"],
                f["verify"], cu, mu, f["after"])
