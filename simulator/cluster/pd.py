"""Prefill/decode (PD) disaggregation: a prefill pool, a decode pool, and a KV link.

Scenario form (``disaggregation:``; absent, every worker is mixed, as before)::

    hardware: {accelerator: H100-SXM, tensor_parallel: 1}  # defaults for both pools
    disaggregation:
      prefill: {count: 2}                     # + accelerator, tensor_parallel, memory_fraction,
      decode: {count: 6, tensor_parallel: 2}  #   price_usd_per_hour, power_idle_w, power_max_w
      link: {bandwidth_gb_s: 50, latency_s: 1.0e-5, shared: true}
      decode_router: least_loaded             # any router.policy name
      local_prefill_max_tokens: null          # conditional disaggregation (needs a prefix cache)

A pool's ``accelerator``, ``tensor_parallel`` and ``memory_fraction`` default to
``hardware``'s; its price and power to ``cost``'s, then to its accelerator's catalog entry.
``hardware.count``, if given, must equal the two pools' counts added (the same devices,
split); each pool's count must be a multiple of its tensor_parallel. Each pool is a
``Deployment`` of its own (hardware, calibration fitted to it, cost model, drafter cost, KV
blocks per worker, price, power); the decode pool's stands for the fleet where the engine
asks for one value.

A request's life:

1. It arrives and ``router.policy`` places it on a prefill worker. There it is prefilled
   (chunked and batched with other prompts as on a mixed worker; the drafter prefills too
   where it has a KV cache) and its first token is sampled. The prefill worker then frees
   its KV (a simplification: real engines hold it until the decode side has pulled it).
   A request of one output token is complete there.
2. Its KV (the prompt's tokens x KV bytes per token: the target's and the drafter's, the
   engine's ``Deployment.kv_bytes_per_token_device`` x tensor_parallel) goes over the link to
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

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np

from specsim.cost_models.catalog import get_hardware
from specsim.cost_models.errors import CatalogError
from specsim.errors import ScenarioError
from specsim.simulator.cluster import requests as rq
from specsim.simulator.metrics.collector import dist
from specsim.simulator.registry import BATCH_SCHEDULERS, EVICTION
from specsim.simulator.routing.routers import RequestFeatures, make_router
from specsim.traces.errors import TraceError

POOLS = ("prefill", "decode")
_USER_ERRORS = (ScenarioError, CatalogError, TraceError)
#: what each pool key falls back to: (section, key)
_FALLBACK = {"accelerator": ("hardware", "accelerator"),
             "tensor_parallel": ("hardware", "tensor_parallel"),
             "memory_fraction": ("hardware", "memory_fraction"),
             "price_usd_per_hour": ("cost", "price_usd_per_hour"),
             "power_idle_w": ("cost", "power_idle_w"),
             "power_max_w": ("cost", "power_max_w")}


# ---------------------------------------------------------------- deployments of the pools


def pool_scenario(sc: Any, name: str) -> Any:
    """The scenario one pool runs: ``hardware`` and ``cost`` from the pool (falling back to
    the scenario's own), no ``disaggregation``. Cross-key rules are checked here."""
    dis, hw = sc["disaggregation"], sc["hardware"]
    pool = dis[name]
    tp = pool["tensor_parallel"] if pool["tensor_parallel"] is not None else hw["tensor_parallel"]
    if pool["count"] % tp:
        raise ScenarioError(f"disaggregation.{name}.count: expected a multiple of "
                            f"tensor_parallel ({tp}, from hardware.tensor_parallel), got "
                            f"{pool['count']}")
    hw_up = {"count": pool["count"], "tensor_parallel": tp}
    for key in ("accelerator", "memory_fraction"):
        if pool[key] is not None:
            hw_up[key] = pool[key]
    cost_up = {k: pool[k] for k in ("price_usd_per_hour", "power_idle_w", "power_max_w")
               if pool[k] is not None}
    return sc.model_copy(update={"hardware": hw.model_copy(update=hw_up),
                                 "cost": sc["cost"].model_copy(update=cost_up),
                                 "disaggregation": None})


def _rekey(msg: str, name: str, pool: Any) -> str:
    """A pool's Deployment names ``hardware.*`` / ``cost.*`` keys: name the key the value
    came from (the pool's own, or the scenario's section it fell back to)."""
    for key, (section, _) in _FALLBACK.items():
        if msg.startswith(f"{section}.{key}") and pool[key] is not None:
            return f"disaggregation.{name}.{key}" + msg[len(f"{section}.{key}"):]
    if msg.startswith("hardware.count"):
        return f"disaggregation.{name}.count" + msg[len("hardware.count"):]
    if msg.startswith(("hardware.", "cost.")):
        return msg
    return f"disaggregation.{name}: {msg}"


def init_deployment(dep: Any, sc: Any, base_dir: Path) -> None:
    """``Deployment.__init__`` for a PD scenario: one Deployment per pool in ``dep.pools``;
    ``dep`` itself takes the decode pool's values (the engine's single-fleet fields)."""
    dis, hw = sc["disaggregation"], sc["hardware"]
    total = dis["prefill"]["count"] + dis["decode"]["count"]
    if "count" in hw.model_fields_set and hw["count"] != total:
        raise ScenarioError(f"hardware.count: {hw['count']} devices, but the disaggregation "
                            f"pools have {dis['prefill']['count']} + {dis['decode']['count']} "
                            f"= {total} (give their sum, or leave hardware.count out)")
    pools = {}
    for name in POOLS:
        pool = dis[name]
        if pool["accelerator"] is not None:  # the key is named as the pool's
            get_hardware(pool["accelerator"], f"disaggregation.{name}.accelerator")
        try:
            pools[name] = type(dep)(pool_scenario(sc, name), base_dir)
        except _USER_ERRORS as exc:
            raise type(exc)(_rekey(str(exc), name, pool)) from None
    dep.__dict__.update(pools["decode"].__dict__)
    dep.sc = sc
    dep.pools = pools
    notes: list[str] = []
    for name in POOLS:
        for n in pools[name].notes:
            if n not in pools["prefill" if name == "decode" else "decode"].notes:
                n = f"{name} pool: {n}"
            if n not in notes:
                notes.append(n)
    link = dis["link"]
    if not ({"bandwidth_gb_s", "latency_s"} <= link.model_fields_set):
        notes.append(f"disaggregation.link: {link['bandwidth_gb_s']:g} GB/s and "
                     f"{link['latency_s'] * 1e6:g} us per transfer; defaults are assumed (one "
                     "400 Gb/s RDMA port, e.g. InfiniBand NDR): set your fabric's")
    dep.notes = notes


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


# ---------------------------------------------------------------- the cluster


class PDCluster:
    """Both pools' workers, the link, the hand-off and what the run reports about them.

    Built by ``Simulation`` after it made the decode pool's workers (the engine's own loop,
    from the decode pool's Deployment). Worker ids: the prefill pool 0..P-1 (so
    ``router.policy`` indexes them as a mixed fleet), the decode pool P..P+D-1.
    """

    def __init__(self, sim: Any, pools: dict[str, Any]) -> None:
        self.sim, self.pools = sim, pools
        self.t = t = sim.table
        self.env = sim.env
        dis = sim.sc["disaggregation"]
        self.link_cfg = dis["link"]
        self.bw = float(self.link_cfg["bandwidth_gb_s"]) * 1e9
        self.latency = float(self.link_cfg["latency_s"])
        self.shared = bool(self.link_cfg["shared"])
        self.local_max = dis["local_prefill_max_tokens"]
        pf = pools["prefill"]
        self.bytes_per_token = float(pf.kv_bytes_per_token_device * pf.tp)
        # --- workers: the engine built the decode pool (ids 0..D-1): renumber it after the
        # prefill pool, and build that
        self.decode = list(sim.workers)
        P = pf.n_workers
        for i, w in enumerate(self.decode):
            w.wid = P + i
            w.arrival_hint = None  # requests come from transfers: no foresight (speed only)
        self.view = PrefillView(t)
        self.prefill = self._build_prefill(pf)
        sim.workers = self.prefill + self.decode
        sim.router = make_router(sim.sc["router"]["policy"], P)
        self.drouter = make_router(dis["decode_router"], len(self.decode))
        self._keep_transferred_kv()
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
        self.link_free = [0.0] * (1 if self.shared else P)
        self.link_busy = [0.0] * len(self.link_free)
        self.inflight = np.zeros(len(self.decode), np.int64)
        self._check_static()

    # ------------------------------------------------------------ construction
    def _build_prefill(self, d: Any) -> list[Any]:
        """The prefill pool's workers, as the engine builds a pool (same scheduler, executor,
        kernel, KV pool), over ``PrefillView``."""
        from specsim.simulator.cluster.worker import Ledger, Worker
        from specsim.simulator.execution.executor import Executor
        from specsim.simulator.execution.kernel import Kernel
        from specsim.simulator.kv.blocks import BlockAllocator

        sim, sc = self.sim, self.sim.sc
        s = sc["scheduler"]
        executor = Executor(d.target, d.drafter, d.overlap_draft,
                            speculating=d.method != "none" and sc["speculation"]["k"] > 0)
        pctx = d.controller.ctx
        pctx.executor = executor
        pctx.class_names = list(getattr(sim.acceptance, "_names", []) or [])
        pctx.class_alpha = (np.asarray(sim.alpha_table[:, 0], np.float64) if self.t.n
                            else np.zeros(1))
        sched_cls = BATCH_SCHEDULERS.get(s["policy"])
        kc = getattr(d, "kv_cache", None)
        keys = None
        if kc is not None:
            from specsim.simulator.kv import prefix_cache as pc

            keys = pc.PrefixKeys(self.t, d.block_size)
        workers = []
        for i in range(d.n_workers):
            kernel = Kernel(self.view, executor, sim.acceptance, sim.alpha_table, d.drafter,
                            d.block_size, d.kv_blocks, compiled=sc["simulation"]["compiled"])
            if kc is None:
                kv = BlockAllocator(d.kv_blocks, d.block_size)
            else:
                kv = pc.PrefixKV(d.kv_blocks, d.block_size, self.view, keys, kc)
                kernel.shared = self.t.kv_shared
            ledger = Ledger(d.tp, d.peak_flops, d.hbm_bw, d.power_idle, d.power_max)
            workers.append(Worker(
                i, self.env, self.view,
                sched_cls(s["max_batch"], s["token_budget"], s["chunked_prefill"],
                          s["max_queue"]),
                kernel, kv, d.controller, d.drafter, ledger, sim.metrics,
                multi_step=bool(sc["simulation"]["fast_path"]),
                record_iterations=sim.record_iterations, on_finish=self._prefill_done,
                arrival_hint=sim.next_arrival_hint,
                notify_finishes=sim.arrivals.notify_finishes,
                eviction=EVICTION.get(s["preemption"])()))
        return workers

    def _keep_transferred_kv(self) -> None:
        """With a prefix cache on the decode pool, a transferred request is admitted without
        a prefix match (its KV came whole over the link) and keeps its kv_len; what it
        computed is cached there when it finishes, as on any worker."""
        for w in self.decode:
            cache = getattr(w, "cache", None)
            if cache is None:
                continue
            admit = cache.admit

            def admitted(rid: int, cache=cache, admit=admit) -> bool:
                if not self.landed[rid] or rid in cache.swapped:
                    return admit(rid)
                kv_len, prefix = int(self.t.kv_len[rid]), cache.prefix
                cache.prefix = False
                try:
                    ok = admit(rid)
                finally:
                    cache.prefix = prefix
                self.t.kv_len[rid] = kv_len  # admit wrote the (empty) match over it
                return ok

            cache.admit = admitted

    def _check_static(self) -> None:
        """Requests too long for the prefill pool's KV (prompt + 1 token) are rejected up
        front, as the engine rejects those too long for the decode pool's."""
        sim, t = self.sim, self.t
        pf = self.pools["prefill"]
        why = sim._static_reject
        big = -(-(t.prompt + 1) // pf.block_size) > pf.kv_blocks - 1
        why[(why == 0) & big] = 2
        sim._eligible = np.flatnonzero(why == 0)

    # ------------------------------------------------------------ routing and hand-off
    def _features(self, rid: int) -> RequestFeatures:
        t = self.t
        return RequestFeatures(rid, int(t.prompt[rid]), int(t.output[rid]),
                               str(t.workload_class[rid]), int(t.session_id[rid]),
                               str(t.slo_tier[rid]))

    def route(self, rid: int) -> Any:
        """Where an arriving request goes: a prefill worker (``router.policy``), or, under
        conditional disaggregation, the decode worker holding most of its prompt."""
        if self.local_max is not None:
            w = self._local_decode(rid)
            if w is not None:
                self.local[rid] = True
                return w
        sim, now = self.sim, self.env.now
        snaps = None
        if sim.router.reads_load:
            for w in self.prefill:
                w.sync(now)
            snaps = [w.snapshot() for w in self.prefill]
        return self.prefill[sim.router.route(self._features(rid), snaps).worker]

    def _local_decode(self, rid: int) -> Any:
        t = self.t
        best, best_hit = None, 0
        for w in self.decode:
            cache = getattr(w, "cache", None)
            if cache is None or not cache.prefix:
                return None
            hit = int(cache.peek(rid)[0])
            if hit > best_hit or (hit == best_hit and best is not None and hit
                                  and w.load < best.load):
                best, best_hit = w, hit
        if best is None or int(t.prompt[rid]) - best_hit > self.local_max:
            return None
        return best

    def _pick_decode(self, rid: int) -> int:
        """The decode worker for a request leaving the prefill pool (local index)."""
        snaps = None
        if self.drouter.reads_load:
            now = self.env.now
            snaps = []
            for i, w in enumerate(self.decode):
                w.sync(now)
                s = w.snapshot()
                snaps.append(dataclasses.replace(s, wid=i,
                                                 queued=s.queued + int(self.inflight[i])))
        return int(self.drouter.route(self._features(rid), snaps).worker)

    def _prefill_done(self, rows: np.ndarray) -> None:
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
            dw = self._pick_decode(rid)
            self.inflight[dw] += 1
            tokens = int(t.kv_len[rid])
            nbytes = tokens * self.bytes_per_token
            li = 0 if self.shared else pw
            start = max(ready, self.link_free[li])
            wire = nbytes / self.bw
            self.link_free[li] = start + wire
            self.link_busy[li] += wire
            end = start + wire + self.latency
            self.ready[rid], self.start[rid], self.end[rid] = ready, start, end
            self.nbytes[rid], self.tokens[rid] = nbytes, tokens
            ev = self.env.timeout(max(end - now, 0.0))
            ev.callbacks.append(lambda _ev, rid=rid, dw=dw: self._land(rid, dw))
        if done:
            self.sim.on_finish(np.array(done, np.int64))

    def _land(self, rid: int, dw: int) -> None:
        """The KV is on the decode worker: the first token reaches the user, decoding starts."""
        t = self.t
        if int(t.kv_len[rid]) != int(self.tokens[rid]):
            raise AssertionError(f"request {rid}: {t.kv_len[rid]} KV tokens landed, "
                                 f"{self.tokens[rid]} were sent")
        end = float(self.end[rid])
        t.first_token[rid] = end
        t.last_delivery[rid] = end
        self.inflight[dw] -= 1
        self.landed[rid] = True
        self.decode[dw].submit(rid)

    # ------------------------------------------------------------ outputs
    def _pool_summary(self, name: str, workers: list[Any], now: float) -> dict[str, Any]:
        d = self.pools[name]
        n = len(workers)
        busy = sum(w.ledger.busy_s for w in workers)
        energy = (sum(w.ledger.energy_j for w in workers)
                  + max(n * now - busy, 0.0) * d.tp * d.power_idle)
        devices = n * d.tp
        peak = max((w.kv.peak for w in workers), default=0)
        return {
            "accelerator": d.hw.name, "devices": devices, "workers": n,
            "tensor_parallel": d.tp, "worker_ids": [w.wid for w in workers[:1]]
            + [w.wid for w in workers[-1:]],
            "price_usd_per_device_hour": d.price, "price_date": d.hw.price_date,
            "power_idle_w": d.power_idle, "power_max_w": d.power_max,
            "cost_usd": devices * d.price * now / 3600.0, "energy_j": energy,
            "busy_fraction": busy / (n * now) if now and n else 0.0,
            "kv_blocks_per_worker": d.kv_blocks,
            "kv_peak_utilization": peak / max(d.kv_blocks, 1),
            "iterations": int(sum(w.ledger.iterations for w in workers)),
            "preemptions": int(sum(w.preemptions for w in workers)),
            "calibration": d.calibration.name,
        }

    def amend_summary(self, out: dict[str, Any], now: float) -> None:
        """metrics.json for a PD run: the fleet sums the pools; ``disaggregation`` has each
        pool, the link and the transfers."""
        t = self.t
        pools = {"prefill": self._pool_summary("prefill", self.prefill, now),
                 "decode": self._pool_summary("decode", self.decode, now)}
        devices = sum(p["devices"] for p in pools.values())
        workers = sum(p["workers"] for p in pools.values())
        cost = sum(p["cost_usd"] for p in pools.values())
        energy = sum(p["energy_j"] for p in pools.values())
        busy = sum(p["busy_fraction"] * p["workers"] for p in pools.values())
        out_tokens = out["output_tokens"]
        names = list(dict.fromkeys(p["accelerator"] for p in pools.values()))
        tps = list(dict.fromkeys(p["tensor_parallel"] for p in pools.values()))
        dates = list(dict.fromkeys(str(p["price_date"]) for p in pools.values()))

        def per_device(key: str) -> float:  # device-weighted: x devices = the fleet's
            return sum(p[key] * p["devices"] for p in pools.values()) / devices

        fleet = dict(out["fleet"])
        fleet.update({
            "accelerator": " + ".join(names), "devices": devices, "workers": workers,
            "tensor_parallel": tps[0] if len(tps) == 1 else "/".join(map(str, tps)),
            "price_usd_per_device_hour": per_device("price_usd_per_device_hour"),
            "price_date": dates[0] if len(dates) == 1 else ", ".join(dates),
            "cost_usd": cost, "energy_j": energy,
            "power_idle_w": per_device("power_idle_w"),
            "power_max_w": per_device("power_max_w"),
            "average_power_w": energy / now if now else 0.0,
        })
        out["fleet"] = fleet
        out["busy_fraction"] = busy / workers if workers else 0.0
        out["kv_peak_utilization"] = max(p["kv_peak_utilization"] for p in pools.values())
        out["cost_usd_per_million_output_tokens"] = (cost / out_tokens * 1e6 if out_tokens
                                                     else None)
        out["energy_j_per_output_token"] = energy / out_tokens if out_tokens else None
        sent = np.isfinite(self.end) & (self.end <= now)  # transfers finished by the end
        wait = self.start - self.ready
        xfer = self.end - self.ready
        done = t.status == rq.DONE
        ttft = t.first_token - t.arrival
        both = done & sent & (ttft > 0)
        n_links = len(self.link_free)
        link = self.link_cfg
        out["disaggregation"] = {
            "pools": pools,
            "link": {"bandwidth_gb_s": link["bandwidth_gb_s"], "latency_s": link["latency_s"],
                     "shared": link["shared"], "links": n_links,
                     "busy_fraction": (sum(self.link_busy) / (n_links * now)) if now else 0.0},
            "decode_router": self.drouter.name,
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

    def amend_frame(self, frame: Any) -> None:
        """requests.csv: where each request was prefilled and its transfer."""
        frame["pd_prefill_worker"] = self.prefill_worker
        frame["pd_prefilled_on_decode"] = self.local
        frame["pd_prefill_token_s"] = self.prefill_token
        frame["pd_kv_bytes"] = self.nbytes
        frame["pd_transfer_start_s"] = self.start
        frame["pd_transfer_end_s"] = self.end
        frame["pd_transfer_s"] = self.end - self.ready
        frame["pd_link_wait_s"] = self.start - self.ready

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
        if not np.allclose(self.nbytes[sent], self.tokens[sent] * self.bytes_per_token):
            raise AssertionError("bytes sent != tokens x KV bytes per token")
        if (self.landed & ~sent).any() or (self.start[sent] < self.ready[sent]).any():
            raise AssertionError("a transfer landed unsent or started before its prefill")
        wire = self.nbytes / self.bw
        for li in range(len(self.link_free)):
            on = sent if self.shared else sent & (self.prefill_worker == li)
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
