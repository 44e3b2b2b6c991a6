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
        """Advance an all-decode batch many steps at once (DESIGN.md, "The hot path").

        Valid while nothing can change the batch: no queue, no prefill, no row within k+1
        tokens of its end (so none finishes or has its k capped), KV fits, the next arrival
        and the horizon not reached. Acceptance draws are keyed by (request, step), so the
        tokens, steps and acceptances are those of the step-by-step loop; times agree to
        floating-point rounding.
        """
        sim, t = self.sim, self.sim.table
        if self.waiting or not len(self.run):
            return None
        run = self.run
        kv0 = t.kv_len[run]
        if (kv0 < t.prefill_target[run]).any():
            return None
        K = sim.controller.k
        B = len(run)
        if B * (K + 1) > self.sched.token_budget:
            return None
        left0 = t.output[run] - t.generated[run]
        # steps possible before the first row gets within K+1 tokens of its end: at most
        # (left - K - 2) // (K + 1) + 1 steps even if every draft is accepted; try a window.
        room = int(left0.min()) - K - 1  # steps left for the nearest row at one token each
        ahead = sim.next_arrival_time() - self.env.now
        if self._last_dt > 0 and ahead < float("inf"):
            room = min(room, int(ahead / self._last_dt) + 2)
        S = min(self.FAST_STEPS, room)
        if S < 2:
            return None
        steps0 = t.steps[run]
        sidx = (steps0[None, :] + np.arange(S)[:, None]).astype(np.uint64)
        if K > 0:
            k = np.full((S, B), K, np.int64)
            if not sim.drafter.proposes_always:
                um = rng.uniform(t.match_key[run][None, :], sidx)
                k = np.where(um <= sim.drafter.match_rate, k, 0)
            cond = np.minimum(sim.alpha_table[t.cls_idx[run], :K] * t.alpha_scale[run, None], 1.0)
            surv = np.cumprod(cond, axis=1)  # (B, K)
            u = rng.uniform(t.accept_key[run][None, :], sidx)  # (S, B)
            acc = np.minimum((u[:, :, None] <= surv[None, :, :]).sum(axis=2), k)
        else:
            k = np.zeros((S, B), np.int64)
            acc = k
        emit = acc + 1
        cum = np.cumsum(emit, axis=0)
        before = cum - emit  # tokens emitted in the segment before step s
        ok = ((left0[None, :] - before) >= K + 2).all(axis=1)
        # KV: blocks held before each step, needed during it, kept after it
        bs = self.kv.block_size
        kvb = kv0[None, :] + before
        need = -(-(kvb + k + 1) // bs)
        held = -(-kvb // bs)
        held[0] = t.blocks[run]
        during_rows = np.maximum(held, need)
        after_rows = np.minimum(during_rows, -(-(kv0[None, :] + cum) // bs))
        during = during_rows.sum(axis=1)
        ok &= during <= self.kv.total
        # price every step: drafting + one verification pass of k+1 tokens per row
        ctx = kvb.astype(np.float64)
        q = (k + 1).astype(np.float64)
        tokens = q.sum(axis=1)
        qc = (q * ctx + q * (q + 1) / 2).sum(axis=1)
        csum = ctx.sum(axis=1)
        vt = sim.target.time(tokens, qc, csum, tokens)
        vf, vb = sim.target.work(tokens, qc, csum, tokens)
        dtt, dtf, dtb = sim.drafter.cost_steps(k, ctx)
        dt = np.maximum(dtt, vt) if sim.overlap_draft else dtt + vt
        end = self.env.now + np.cumsum(dt)
        start = end - dt
        ok &= start < sim.next_arrival_time()
        if sim.horizon is not None:
            ok &= end < sim.horizon
        m = int(np.argmin(ok)) if not ok.all() else S
        self._last_dt = float(dt[0])
        if m < 2:
            return None
        return {"m": m, "k": k[:m], "acc": acc[:m], "emit": cum[m - 1], "dt": dt[:m],
                "start": start[:m], "end": float(end[m - 1]), "draft": dtt[:m], "verify": vt[:m],
                "flops": vf[:m] + dtf[:m], "bytes": vb[:m] + dtb[:m], "tokens": tokens[:m],
                "during": during[:m], "after_rows": after_rows[m - 1],
                "after": after_rows[:m].sum(axis=1)}

    def _fast_commit(self, f: dict) -> None:
        sim, t, kv, now = self.sim, self.sim.table, self.kv, self.env.now
        run, m, B = self.run, f["m"], len(self.run)
        acc = f["acc"].sum(axis=0)
        emitted = f["emit"]
        first_gap = (f["start"][0] + f["dt"][0]) - t.last_delivery[run]
        sim.metrics.add_itl(first_gap)
        if m > 1:
            sim.metrics.add_itl(np.repeat(f["dt"][1:], B))
        t.generated[run] += emitted
        t.accepted[run] += acc
        t.bonus[run] += m
        t.drafted[run] += f["k"].sum(axis=0)
        t.steps[run] += m
        t.kv_len[run] += emitted
        t.last_delivery[run] = now
        held = int(t.blocks[run].sum())
        t.blocks[run] = f["after_rows"]
        kv.used += int(f["after_rows"].sum()) - held
        kv.peak = max(kv.peak, int(f["during"].max()), kv.used)
        dt = f["dt"]
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
            sim.metrics.add_iterations(
                f["start"], self.wid, B, B, 0, f["tokens"], f["k"].sum(axis=1), f["draft"],
                f["verify"], cu, mu, f["after"])
