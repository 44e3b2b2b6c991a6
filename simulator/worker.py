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
        verify = sim.target.time(tokens, qc, ctx_sum, logits) if tokens > 0 else 0.0
        vflops, vbytes = sim.target.work(tokens, qc, ctx_sum, logits) if tokens > 0 else (0, 0)
        if sim.overlap_draft:
            dt = max(draft.time_s, verify)
        else:
            dt = draft.time_s + verify
        return {"time": dt, "dec": dec, "k": k, "pre": pre, "chunk": chunk, "rem": rem,
                "draft": draft.time_s, "verify": verify, "tokens": tokens,
                "flops": float(vflops) + draft.flops, "bytes": float(vbytes) + draft.bytes}

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
