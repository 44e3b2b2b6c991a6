"""Prefill/decode (PD) disaggregation: a prefill pool, one decode pool or several, and a KV
link.

Scenario form (``disaggregation:``; absent, every worker is mixed, as before)::

    hardware: {accelerator: H100-SXM, tensor_parallel: 1}  # defaults for every pool
    disaggregation:
      prefill: {count: 2}                     # + accelerator, tensor_parallel, memory_fraction,
      decode: {count: 6, tensor_parallel: 2}  #   price_usd_per_hour, power_idle_w, power_max_w
      link: {bandwidth_gb_s: 50, latency_s: 1.0e-5, shared: true}
      decode_router: least_loaded             # any router.policy name
      local_prefill_max_tokens: null          # conditional disaggregation (needs a prefix cache)

Several decode pools (``decode_pools:`` instead of ``decode:``, a list of decode's keys plus
a ``name``; e.g. an A100 pool and an H100 pool behind one H100 prefill pool,
``scenarios/pd_two_decode_pools.yaml``): the hand-off offers ``decode_router`` the workers
of every decode pool that can hold the request's KV (prompt + output within one worker's
blocks, the rule that otherwise rejects it at arrival), so the router, which must read
load, picks a pool and a worker in one decision (``least_loaded_per_kv`` weighs each
worker's load by its KV capacity); its reason, prefixed by the pool's name, is
``pd_decode_route_reason``. A request is rejected at arrival only when no decode pool can
hold it. Each decode pool is reported as its own pool (``disaggregation.pools.<name>``).

A pool's ``accelerator``, ``tensor_parallel`` and ``memory_fraction`` default to
``hardware``'s; its price and power to ``cost``'s, then to its accelerator's catalog entry.
``hardware.count``, if given, must equal the two pools' counts added (the same devices,
split); each pool's count must be a multiple of its tensor_parallel. Each pool is a pool
of the fleet (``cluster/build.py``) with a ``Deployment`` of its own (hardware, calibration
fitted to it, cost model, drafter cost, KV blocks per worker, price, power), so the two
pools may be different accelerators (an H100 prefill pool, an A100 decode pool); the decode
pool's stands for the fleet where a metric has one value (model, speculation). This module
is the link between them: the hand-off, the transfers, their metrics and checks.

A request's life:

1. It arrives and ``router.policy`` places it on a prefill worker. There it is prefilled
   (chunked and batched with other prompts as on a mixed worker; the drafter prefills too
   where it has a KV cache) and its first token is sampled. The prefill worker then frees
   its KV (a simplification: real engines hold it until the decode side has pulled it).
   A request of one output token is complete there.
2. Its KV (the prompt's tokens x KV bytes per token: the target's and the drafter's, the
   engine's ``Deployment.kv_bytes_per_token_device`` x tensor_parallel; for a model with
   layer kinds ``KVSizes.sequence_bytes`` of ``Deployment.kv_worker``: the full layers' KV
   per token, the window layers' for at most the window, the linear layers' state once,
   each byte once however many devices hold a copy) goes over the link to
   a decode worker chosen then by ``decode_router`` (requests already on their way to a
   worker count in its load). Time on the wire = bytes / bandwidth + latency. Contention:
   transfers are serialised first come, first served on a link (a busy-until clock): a link
   is occupied for bytes / bandwidth per transfer, and the latency (propagation, setup) is
   added to each transfer without occupying it. ``shared: true``: one link for the fleet;
   ``false``: one per prefill worker (its NIC), so only transfers from the same prefill
   worker queue. The KV of the first token itself is not sent: the token is the input of the
   first decode step, as on a mixed worker (kv_len = prompt, generated = 1 at the hand-off).
3. When the KV lands, the first token reaches the user (TTFT = queueing + prefill + link
   wait + transfer, as when the decode side streams the response, SGLang's and vLLM's PD
   setups) and the decode worker admits the request with its prompt's KV present: no prefill
   there; it decodes the remaining tokens with speculation as configured (a preemption there
   recomputes on the decode worker, as on a mixed one).

Conditional disaggregation (``local_prefill_max_tokens``, with ``kv_cache.prefix_cache``):
a request (a later turn of a session, or one whose prefix blocks match) goes straight to the
decode worker that has the most of its prompt cached in HBM when at most this many of its
prompt tokens are not cached there; that worker prefills the rest itself (a partial prefill,
no transfer) and decodes. Decode workers cache what they served (prompt + output pages), so
a session's next turn finds its prefix there.

Metrics (``metrics.json`` -> ``disaggregation``): per pool: devices, workers, busy fraction,
KV peak, cost, energy; the link: transfers, bytes moved, transfer time (mean, p50, p90,
p99; wait included), time waiting for the link, its busy fraction; the share of TTFT spent on
the link. ``requests.csv`` gains ``pd_*`` columns. Fleet cost and energy sum the pools.
"""


from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from specsim.simulator.cluster import requests as rq
from specsim.simulator.metrics.collector import dist

# ---------------------------------------------------------------- the prefill pool's table


class PrefillView:
    """The request table as the prefill pool sees it: every column is the table's own
    (reads and writes go through), except ``output``, capped at 1: a prefill worker stops at
    the first token."""

    __slots__ = ("_base", "output")
    #: a finished row lives on in the decode pool: a segment must not run past a finish
    #: while it holds other rows (Kernel.plan, segments through prefill chunks)
    hands_off = True

    def __init__(self, base: Any) -> None:
        object.__setattr__(self, "_base", base)
        object.__setattr__(self, "output", np.minimum(base.output, 1))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._base, name, value)


# ---------------------------------------------------------------- the link at run time


@dataclass(frozen=True)
class Handoff:
    """One request's KV on its way from a prefill worker to decode worker ``worker`` (an
    index in the decode pool): ``tokens`` of KV, ``nbytes`` on the wire, ready at the end of
    the prefill step, on the link from ``start``, landed at ``end``."""

    rid: int
    worker: int
    tokens: int
    nbytes: float
    ready: float
    start: float
    end: float


class PDLink:
    """A ``build.Link`` at run time: the hand-off from the prefill pool to the decode pool,
    the transfers' clocks and records, and what the run reports about them.

    Made by ``Simulation`` before the pools' workers (the prefill workers report their
    finished rows to ``prefill_done``); ``attach`` gives it both pools once built.
    """

    def __init__(self, sim: Any, link: Any) -> None:
        self.sim, self.link = sim, link
        self.t = t = sim.table
        self.env = sim.env
        self.bw, self.latency, self.shared = link.bandwidth_bytes_s, link.latency_s, link.shared
        self.bytes_per_token = link.bytes_per_token
        self.local_max = sim.sc.disaggregation.local_prefill_max_tokens
        # --- requests: prefill-side sizes, hand-off and link records
        n = t.n
        self.prefill_worker = np.full(n, -1, np.int64)
        self.prefill_token = np.full(n, np.nan)  # first token sampled on the prefill pool
        self.ready = np.full(n, np.nan)
        self.start = np.full(n, np.nan)
        self.end = np.full(n, np.nan)
        self.nbytes = np.zeros(n)
        self.tokens = np.zeros(n, np.int64)
        self.landed = np.zeros(n, bool)
        self.local = np.zeros(n, bool)  # prefilled on a decode worker (conditional)
        self.decode_reason = np.full(n, -1, np.int32)  # the decode router's (a reason code)

    def attach(self, source: Any, targets: list[Any]) -> None:
        """The pools, their workers built: the prefill pool and the decode pools (their
        workers are consecutive in id order: ``decode`` lists them all)."""
        self.source, self.targets = source, targets
        self.target = targets[0]
        self.prefill = source.workers
        self.decode = [w for p in targets for w in p.workers]
        self.link_free = [0.0] * (1 if self.shared else len(self.prefill))
        self.link_busy = [0.0] * len(self.link_free)
        self.inflight = np.zeros(len(self.decode), np.int64)
        if len(targets) > 1:  # one router over every decode pool's workers
            from specsim.simulator.routing.routers import make_router

            t = self.t
            self.pool_of = np.repeat(np.arange(len(targets)), [len(p.workers) for p in targets])
            self.fits = np.array([~p.too_big(t.prompt, t.output) for p in targets])
            self.router = make_router(targets[0].router_policy, len(self.decode))
        else:
            self.router = self.target.router

    def _route(self, rid: int) -> tuple[Any, str]:
        """The decode worker a request's KV goes to, and why: the decode pool's router, or,
        with several decode pools, one router over the workers of those that can hold the
        request (requests on their way to a worker count in its load)."""
        if len(self.targets) == 1:
            return self.sim.route_in(self.target, rid, self.inflight)
        fits = self.fits[:, rid]
        cand = [i for i in range(len(self.decode)) if fits[self.pool_of[i]]]
        names = [p.name for p in self.targets]
        if len(cand) == 1:
            w = self.decode[cand[0]]
            return w, f"{names[self.pool_of[cand[0]]]}: the only decode worker that can hold it"
        now = self.env.now
        snaps = []
        for j, i in enumerate(cand):
            w = self.decode[i]
            w.sync(now)
            snaps.append(w.snapshot(j, int(self.inflight[i])))
        decision = self.router.route(self.sim.features(rid), snaps)
        i = cand[decision.worker]
        return self.decode[i], f"{names[self.pool_of[i]]}: {decision.reason}"

    # ------------------------------------------------------------ routing and hand-off
    def local_worker(self, rid: int) -> tuple[Any, str] | None:
        """Conditional disaggregation: the decode worker holding most of an arriving
        request's prompt in HBM, when at most ``local_prefill_max_tokens`` of it are not
        cached there (it prefills the rest itself), and why; None: the request enters the
        prefill pool."""
        if self.local_max is None:
            return None
        t = self.t
        best, best_hit = None, 0
        for i, w in enumerate(self.decode):
            cache = getattr(w, "cache", None)
            if cache is None or not cache.prefix:
                return None
            if len(self.targets) > 1 and not self.fits[self.pool_of[i], rid]:
                continue  # its pool cannot hold the request's KV
            hit = int(cache.peek(rid)[0])
            if hit > best_hit or (hit == best_hit and best is not None and hit
                                  and w.load < best.load):
                best, best_hit = w, hit
        if best is None or int(t.prompt[rid]) - best_hit > self.local_max:
            return None
        self.local[rid] = True
        return best, (f"conditional: {best_hit} of {int(t.prompt[rid])} prompt tokens cached "
                      f"on decode worker {best.wid}")

    def prefill_done(self, rows: np.ndarray) -> None:
        """A prefill worker's finished rows: complete (one-token outputs) or sent over the
        link to a decode worker."""
        t, now = self.t, self.env.now
        done = []
        for rid in rows.tolist():
            pw = int(t.worker[rid])
            self.prefill_worker[rid] = pw
            self.prefill_token[rid] = t.first_token[rid]
            if t.generated[rid] >= t.output[rid]:
                done.append(rid)
                continue
            ready = float(t.finish[rid])  # the step that sampled the first token ended
            t.finish[rid] = np.nan
            t.first_token[rid] = np.nan  # it reaches the user with the hand-off
            t.last_delivery[rid] = np.nan
            t.status[rid] = rq.QUEUED  # in flight, on the link
            # the decode pool's router: requests on their way to a worker count in its load
            w, reason = self._route(rid)
            dw = w.wid - self.target.first_wid
            self.decode_reason[rid] = t.reason_code(reason)
            self.inflight[dw] += 1
            tokens = int(t.kv_len[rid])
            nbytes = self.link.transfer_bytes(tokens)
            li = 0 if self.shared else pw - self.source.first_wid
            start = max(ready, self.link_free[li])
            wire = nbytes / self.bw
            self.link_free[li] = start + wire
            self.link_busy[li] += wire
            end = start + wire + self.latency
            self.ready[rid], self.start[rid], self.end[rid] = ready, start, end
            self.nbytes[rid], self.tokens[rid] = nbytes, tokens
            h = Handoff(rid, dw, tokens, nbytes, ready, start, end)
            ev = self.env.timeout(max(end - now, 0.0))
            ev.callbacks.append(lambda _ev, h=h: self._land(h))
        if done:
            self.sim.on_finish(np.array(done, np.int64))

    def _land(self, h: Handoff) -> None:
        """The KV is on the decode worker: the first token reaches the user, decoding starts
        (the worker admits the request with the KV it brought: no prefill, no prefix
        match)."""
        t, rid = self.t, h.rid
        if int(t.kv_len[rid]) != h.tokens:
            raise AssertionError(f"request {rid}: {t.kv_len[rid]} KV tokens landed, "
                                 f"{h.tokens} were sent")
        t.first_token[rid] = h.end
        t.last_delivery[rid] = h.end
        self.inflight[h.worker] -= 1
        self.landed[rid] = True
        t.kv_landed[rid] = True
        self.decode[h.worker].submit(rid)

    def metrics(self, now: float) -> dict[str, Any]:
        """metrics.json's ``disaggregation`` (beside the pools): the link, the transfers,
        the share of TTFT spent on the link."""
        t = self.t
        sent = np.isfinite(self.end) & (self.end <= now)  # transfers finished by the end
        wait = self.start - self.ready
        xfer = self.end - self.ready
        done = t.status == rq.DONE
        ttft = t.first_token - t.arrival
        both = done & sent & (ttft > 0)
        n_links = len(self.link_free)
        link = self.link.config
        return {
            "link": {"bandwidth_gb_s": link.bandwidth_gb_s, "latency_s": link.latency_s,
                     "shared": link.shared, "links": n_links,
                     "busy_fraction": (sum(self.link_busy) / (n_links * now)) if now else 0.0},
            "decode_router": self.router.name,
            "transfers": int(sent.sum()),
            "transfers_in_flight_at_end": int((np.isfinite(self.end) & ~self.landed).sum()),
            "bytes_moved": float(self.nbytes[sent].sum()),
            "kv_bytes_per_token": self.bytes_per_token,
            "transfer_s": dist(xfer[sent]),
            "link_wait_s": dist(wait[sent]),
            "prefill_ttft_s": dist((self.prefill_token - t.arrival)[both]),
            "transfer_share_of_ttft": (float(np.mean(xfer[both] / ttft[both])) if both.any()
                                       else None),
            "completed_on_prefill_pool": int((done & (self.prefill_worker >= 0)
                                              & ~np.isfinite(self.end)).sum()),
            "prefilled_on_decode_pool": int(self.local.sum()),
        }

    def amend_columns(self, frame: dict[str, np.ndarray]) -> None:
        """requests.csv's columns (by name): where each request was prefilled and its
        transfer."""
        start, end, ready = self.start, self.end, self.ready
        frame["pd_prefill_worker"] = self.prefill_worker
        frame["pd_prefilled_on_decode"] = self.local
        frame["pd_prefill_token_s"] = self.prefill_token
        frame["pd_kv_bytes"] = self.nbytes
        frame["pd_transfer_start_s"] = start
        frame["pd_transfer_end_s"] = end
        frame["pd_transfer_s"] = end - ready
        frame["pd_link_wait_s"] = start - ready
        frame["pd_decode_route_reason"] = self.t.route_reason(self.decode_reason)

    def check(self, arrived: np.ndarray) -> None:
        """PD invariants (``Simulation.check_invariants``): every arrival (``arrived``, the
        engine's ``Simulation.arrived``) completed, rejected or in flight; tokens conserved
        over the link; link intervals disjoint; no KV held on either pool once nothing is in
        flight."""
        t, now = self.t, float(self.env.now)
        if (t.status[arrived] == rq.PENDING).any():
            raise AssertionError("an arrived request is neither completed, rejected nor in "
                                 "flight")
        sent = np.isfinite(self.end)
        if (self.tokens[sent] != t.prompt[sent]).any():
            raise AssertionError("a transfer did not carry the prompt's KV")
        want = np.array([self.link.transfer_bytes(x) for x in self.tokens[sent]])
        if not np.allclose(self.nbytes[sent], want.reshape(self.nbytes[sent].shape)):
            raise AssertionError("bytes sent != the sequence's KV bytes (tokens x KV bytes "
                                 "per token, + the window's KV and the linear layers' state)")
        if (self.landed & ~sent).any() or (self.start[sent] < self.ready[sent]).any():
            raise AssertionError("a transfer landed unsent or started before its prefill")
        wire = self.nbytes / self.bw
        for li in range(len(self.link_free)):
            on = sent if self.shared else sent & (self.prefill_worker
                                                     == li + self.source.first_wid)
            order = np.argsort(self.start[on], kind="stable")
            s, e = self.start[on][order], (self.start + wire)[on][order]
            if (s[1:] < e[:-1] - 1e-12 * np.maximum(1.0, e[:-1])).any():
                raise AssertionError(f"link {li}: two transfers overlap")
        done = t.status == rq.DONE
        if (t.generated[done] != t.output[done]).any():
            raise AssertionError("a completed request's tokens != its requested output")
        if (self.landed & (t.generated < 1)).any():
            raise AssertionError("a request reached the decode pool without its first token")
        in_flight = arrived & ~done & (t.status != rq.REJECTED)
        if not in_flight.any():
            for w in self.sim.workers:
                held = getattr(w.kv, "held", w.kv.used)
                if held:
                    raise AssertionError(f"worker {w.wid}: {held} KV blocks held at the end")
        if math.isfinite(now) and (self.end[self.landed] > now + 1e-9).any():
            raise AssertionError("a transfer landed after the end of the run")
