"""Build a simulation from a validated scenario, run it, and summarise it.

``Simulation`` wires the pieces (trace -> router -> workers -> cost models -> metrics);
``run_scenario`` is the Python API the CLI and notebooks use.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import simpy

from specsim import limits
from specsim.cost_models.calibration import (
    UNCALIBRATED,
    UNCALIBRATED_REF,
    Calibration,
    default_profile,
    load_profile,
    uncalibrated_default,
)
from specsim.cost_models.catalog import get_hardware, get_model, get_precision
from specsim.cost_models.errors import CatalogError
from specsim.cost_models.roofline import ForwardCostModel
from specsim.errors import ScenarioError
from specsim.simulator import rng
from specsim.simulator.cluster import requests as rq
from specsim.simulator.cluster.arrivals import ClosedLoop, OpenLoop
from specsim.simulator.cluster.overload import Overloaded, make_watch
from specsim.simulator.cluster.worker import Ledger, Worker
from specsim.simulator.execution.executor import Executor
from specsim.simulator.execution.kernel import SPEC_ITER_COLUMNS, Kernel
from specsim.simulator.kv import prefix_cache as pc
from specsim.simulator.kv.blocks import BlockAllocator
from specsim.simulator.kv.eviction import Newest  # noqa: F401  (registers the eviction policies)
from specsim.simulator.metrics.collector import Metrics, dist, slo_attainment
from specsim.simulator.metrics.collector import tpot as metrics_tpot
from specsim.simulator.registry import BATCH_SCHEDULERS, EVICTION
from specsim.simulator.routing.routers import RequestFeatures, make_router
from specsim.simulator.scenario import config as cfg
from specsim.simulator.scenario.schema import Scenario
from specsim.simulator.scheduling.batching import FcfsScheduler  # noqa: F401  (registers "fcfs")
from specsim.simulator.speculation import engine_config
from specsim.simulator.speculation.acceptance import build_acceptance
from specsim.simulator.speculation.drafters import (
    DraftContext,
    Drafter,
    DrafterModel,
    NoDrafter,
    build_drafter,
)
from specsim.simulator.speculation.per_class import (
    Member,
    PerClassDrafter,
    SwitchingPolicy,
    combined_drafter_model,
)
from specsim.simulator.speculation.policies import PolicyContext, make_policy
from specsim.traces.errors import TraceError

USER_ERRORS = (ScenarioError, CatalogError, TraceError)


#: GB/s per device of a KV tier with no link given or in the catalog (assumed: a PCIe Gen5
#: x16 host link's practical copy rate)
ASSUMED_TIER_GB_S = 25.0


@dataclass
class Result:
    """What a run produced: the metrics dict and the per-request / per-iteration tables."""

    metrics: dict[str, Any]
    requests: pd.DataFrame
    iterations: pd.DataFrame | None  # None: streamed to the --out folder
    scenario: dict[str, Any]
    notes: list[str] = field(default_factory=list)


class Deployment:
    """A scenario resolved against the catalogs: hardware, model, cost models, drafter,
    speculation policy, acceptance, KV blocks, price and power, with every rule that
    spans keys checked. No trace and no simulation: ``specsim validate`` and planners
    build this alone.
    """

    def __init__(self, sc: Scenario, base_dir: Path) -> None:
        self.sc = sc
        self.notes: list[str] = []
        self.pools: dict[str, Deployment] | None = None
        if sc.get("disaggregation") is not None:  # prefill/decode pools: cluster/pd.py
            from specsim.simulator.cluster.pd import init_deployment

            init_deployment(self, sc, base_dir)
            return
        self.seed = int(sc["seed"])
        hw_sec, spec = sc["hardware"], sc["speculation"]
        # --- hardware, model, calibration
        self.hw = get_hardware(hw_sec["accelerator"], "hardware.accelerator")
        self.model = get_model(sc["model"], "model")
        self.tp = int(hw_sec["tensor_parallel"])
        limits.check_tensor_parallel(self.tp, self.model.n_heads, self.model.n_kv_heads,
                                     self.model.name)
        if hw_sec["count"] % self.tp:
            raise ScenarioError(f"hardware.count: expected a multiple of tensor_parallel "
                                f"({self.tp}), got {hw_sec['count']}")
        self.n_workers = hw_sec["count"] // self.tp
        limits.check_workers(self.n_workers, "hardware.count", devices=hw_sec["count"],
                             prefix_cache=bool(sc.kv_cache.prefix_cache),
                             tiers=len(sc.kv_cache.tiers or ()))
        self.calibration = self._calibration(sc.get("calibration"), base_dir)
        self.precision = get_precision(sc.quantization.model_dump(), "quantization")
        self.target = ForwardCostModel(self.model, self.hw, self.tp, self.precision,
                                       self.calibration)
        if self.target.linear_dtype != self.precision.compute_dtype:
            self.notes.append(f"{self.hw.name} has no {self.precision.compute_dtype} peak: linear "
                              f"layers priced at its {self.target.linear_dtype} peak")
        # --- speculation
        self.method = spec["method"]
        engine_note = engine_config.note(spec)  # given as vLLM / SGLang flags
        if engine_note is not None:
            self.notes.append(engine_note)
        self.drafter, drafter_model = self._drafter(spec)
        if (spec["per_class"] or spec["switching"]) and self.method != "none":  # drafters
            # per class (speculation/per_class.py); with method none nothing drafts
            self.drafter, drafter_model = self._per_class(spec, self.drafter, drafter_model,
                                                          base_dir)
        self.controller = make_policy(spec["policy"], self.method, spec["k"], PolicyContext(
            spec["k"], dict(spec["policy_params"] or {}),
            ridge_tokens=self.target.ridge_tokens()))
        if isinstance(self.drafter, PerClassDrafter) and self.drafter.fallback is not None \
                and self.controller.fixed_k != 0:  # switching at run time (rules 4-6)
            self.controller = SwitchingPolicy(self.controller, spec["switching"], self.drafter)
        self.overlap_draft = bool(spec["overlap_draft"])
        acc_sec = spec["acceptance"]
        if self.method != "none" and acc_sec is None:
            raise ScenarioError("speculation.acceptance: required when speculation.method is "
                                f"{self.method!r} (a profile name, alpha, or tau at k)")
        self.acceptance = (build_acceptance(acc_sec, self.seed, speculation=spec,
                                            base_dir=base_dir, notes=self.notes)
                           if acc_sec is not None
                           else build_acceptance({"alpha": 0.0}, self.seed))
        if isinstance(self.drafter, PerClassDrafter):
            self.drafter.members[0].acceptance = self.acceptance
        # --- memory: weights of target (+ drafter) and KV per token, per device
        self.block_size = int(sc["scheduler"]["block_size"])
        self.kv_blocks = self._kv_blocks(hw_sec["memory_fraction"], drafter_model,
                                         sc["scheduler"]["kv_blocks"])
        self.kv_cache = self._kv_cache(sc["kv_cache"])
        # --- power and price
        cost = sc["cost"]
        self.price = cost["price_usd_per_hour"] if cost["price_usd_per_hour"] is not None \
            else self.hw.price_usd_per_hour
        self.power_idle = cost["power_idle_w"] if cost["power_idle_w"] is not None \
            else self.hw.power_idle_w
        self.power_max = cost["power_max_w"] if cost["power_max_w"] is not None \
            else self.hw.power_max_w
        if self.power_idle > self.power_max:
            key = "cost.power_idle_w" if cost["power_idle_w"] is not None else "cost.power_max_w"
            raise ScenarioError(f"{key}: expected idle power ({self.power_idle:g} W) at most the "
                                f"maximum power ({self.power_max:g} W)"
                                + ("" if cost["power_idle_w"] is not None and
                                   cost["power_max_w"] is not None
                                   else f" ({self.hw.name}'s catalog gives the other)"))
        self.peak_flops = self.target.linear_peak
        self.hbm_bw = self.hw.hbm_bw

    def _calibration(self, ref: str | None, base_dir: Path) -> Calibration:
        """The scenario's profile; by default the bundled one fitted to this hardware, and the
        uncalibrated default (labelled in every output) where none is."""
        if ref == UNCALIBRATED_REF:
            return uncalibrated_default(self.hw.name)
        if ref is None:
            cal = default_profile(self.hw.name)
            if cal is None:
                self.notes.append(f"no calibration profile is fitted to {self.hw.name}: its "
                                  "times rest on the uncalibrated default (assumed values)")
                return uncalibrated_default(self.hw.name)
            return cal
        cal = load_profile(ref, base_dir, "calibration")
        if cal.hardware and cal.hardware != self.hw.name:
            self.notes.append(f"calibration {cal.name} was fitted on {cal.hardware}, applied here "
                              f"to {self.hw.name}")
        return cal

    def _drafter(self, spec: dict[str, Any]) -> tuple[Drafter, DrafterModel | None]:
        built = build_drafter(DraftContext(spec, self.model, self.target, self.hw, self.tp,
                                           self.calibration))  # validates the section
        if spec["method"] != "none" and spec["k"] == 0:  # k: 0 configures no speculator
            return NoDrafter(), None
        return built

    def _per_class(self, spec: Any, own: Drafter, own_model: DrafterModel | None,
                   base_dir: Path) -> tuple[Drafter, Any]:
        """The composite of the scenario's drafter and each class's own (per_class.py); its
        weights and KV per token are all the members' (every drafter is loaded)."""
        if spec.get("tree") is not None:
            raise ScenarioError("speculation.tree: not with speculation.per_class or "
                                "switching (every class's drafter drafts a chain)")
        members = [Member("scenario", own, int(spec["k"]), None, spec["method"])]
        models = [own_model] if own_model is not None else []
        of_class = {}
        entries = [(f"speculation.per_class.{name}", name, entry)
                   for name, entry in (spec["per_class"] or {}).items()]
        if spec["switching"] is not None:  # the fallback is one more member (rule 4)
            entries.append(("speculation.switching.fallback", None,
                            spec["switching"]["fallback"]))
        for where, name, entry in entries:
            try:
                drafter, model = self._drafter(entry)
                acc = entry["acceptance"]
                if entry["method"] != "none" and acc is None:
                    raise ScenarioError(f"acceptance: required when method is "
                                        f"{entry['method']!r} (a profile name, alpha, or tau "
                                        "at k)")
                acceptance = (build_acceptance(acc, self.seed, speculation=entry,
                                               base_dir=base_dir, notes=self.notes)
                              if acc is not None else build_acceptance({"alpha": 0.0},
                                                                      self.seed))
            except (ScenarioError, CatalogError) as exc:
                msg = str(exc)
                msg = msg[len("speculation."):] if msg.startswith("speculation.") else msg
                raise ScenarioError(f"{where}.{msg}") from None
            k = int(entry["k"]) if entry["method"] != "none" else 0
            if name is not None:
                of_class[name] = len(members)
            members.append(Member(name or "fallback", drafter, k, acceptance, entry["method"],
                                  where))
            if model is not None:
                models.append(model)
        composite = PerClassDrafter(members, of_class)
        if spec["switching"] is not None:
            composite.fallback = len(members) - 1
        self.notes.append("drafter per class: " + composite.describe())
        return composite, (combined_drafter_model(models) if models else None)

    def _kv_cache(self, kc: Any) -> pc.CacheConfig | None:
        """``kv_cache:`` in pages and bytes of one worker (None: blocks counted as before).
        Tier bandwidths are per device: a tensor-parallel group moves its shards at once."""
        if kc is None or not kc.enabled:
            return None
        ps = self.block_size
        if kc.page_size is not None and kc.page_size != ps:
            raise ScenarioError(f"kv_cache.page_size: expected scheduler.block_size ({ps}): a "
                                f"cache page is a KV block, got {kc.page_size}")
        page_bytes = max(int(round(self.kv_bytes_per_token_device * self.tp * ps)), 1)
        tiers, names, said = [], [], []
        hw = self.hw
        for i, t in enumerate(kc.tiers):
            cap, bw, whence = t["capacity_gb"], t["bandwidth_gb_s"], []
            host = t["name"] == "host_dram"  # the only tier with catalog defaults
            if cap is None:
                if not host or hw.host_memory_bytes is None:
                    raise ScenarioError(
                        f"kv_cache.tiers.{i}.capacity_gb: expected GB of this worker's KV "
                        f"the tier holds (only host_dram has a catalog default, and the "
                        f"{hw.name} catalog entry has "
                        + ("one" if hw.host_memory_bytes else "no host.memory_gb_per_device")
                        + ")")
                cap = hw.host_memory_bytes * self.tp / 1e9  # the worker's devices' share
                whence.append("capacity")
            if bw is None:
                if host and hw.host_link_bw is not None:
                    bw = hw.host_link_bw / 1e9
                    whence.append("link")
                else:
                    bw = ASSUMED_TIER_GB_S
                    whence.append("assumed link")
            if cap * 1e9 < page_bytes:
                raise ScenarioError(f"kv_cache.tiers.{i}.capacity_gb: {cap:g} GB "
                                    f"holds no {page_bytes:,}-byte page of {self.model.name}")
            src = [w for w in whence if w != "assumed link"]
            source = "; ".join(
                ([f"{' and '.join(src)} from the {hw.name} catalog entry: {hw.host_source}"]
                 if src else [])
                + (["assumed link default"] if "assumed link" in whence else [])) or "scenario"
            tiers.append(pc.TierSpec(t["name"], cap * 1e9, bw * 1e9 * self.tp, t["latency_s"],
                                     source))
            names.append(t["name"])
            said.append(f"{t['name']} {cap:g} GB at {bw:g} GB/s per device + "
                        f"{t['latency_s'] * 1e6:g} us"
                        + (f" ({' and '.join(src)} from the {hw.name} catalog entry: "
                           f"{hw.host_source})" if src else "")
                        + (" (assumed link default)" if "assumed link" in whence else ""))
        swap_tier = 1 + (names.index(kc.swap_tier) if kc.swap_tier is not None else 0)
        if tiers:
            self.notes.append("kv_cache tiers (per worker): " + "; ".join(said)
                              + "; promotions and swaps are charged to the iteration that "
                                "needs them, demotions are background write-backs (not "
                                "charged)")
        return pc.CacheConfig(bool(kc.prefix_cache), ps, page_bytes, kc.eviction, tiers,
                              kc.preemption == "swap", swap_tier, bool(kc.layerwise_loading))

    def _kv_blocks(self, fraction: float, drafter: Any, explicit: int | None = None) -> int:
        """KV blocks per worker: what ``fraction`` of memory holds after the weights, or the
        scenario's explicit count (``scheduler.kv_blocks`` / vLLM's
        ``num_gpu_blocks_override``), checked against the whole memory after the weights."""
        usable = self.hw.hbm_bytes * fraction
        weights = self.target.weight_bytes_per_device
        kv_per_token = self.target.kv_bytes_per_token / self.tp
        what = f"{self.model.name} ({self.precision.weights.name})"
        if drafter is not None:
            weights += drafter.cost.weight_bytes_per_device
            kv_per_token += drafter.cost.kv_bytes_per_token / self.tp
            what += f" + drafter {drafter.model.name}"
        self.kv_bytes_per_token_device = kv_per_token
        self.weight_bytes_device = weights
        if explicit is not None:
            # like vLLM's override, the count replaces the memory_fraction sizing; it must still
            # fit in the device's memory next to the weights
            key = ("engine.num_gpu_blocks_override" if self.sc["engine"]["num_gpu_blocks_override"]
                   is not None else "scheduler.kv_blocks")
            kv = explicit * self.block_size * kv_per_token
            if weights + kv > self.hw.hbm_bytes:
                left = max(self.hw.hbm_bytes - weights, 0.0)
                most = int(left // (kv_per_token * self.block_size))
                raise ScenarioError(
                    f"{key}: {explicit:,} blocks of {self.block_size} tokens need "
                    f"{kv / 1e9:.1f} GB per device, but {self.hw.name} has "
                    f"{self.hw.hbm_bytes / 1e9:.0f} GB and {what} takes {weights / 1e9:.1f} GB "
                    f"of it at tensor_parallel={self.tp} ({left / 1e9:.1f} GB left: at most "
                    f"{most:,} blocks)")
            return int(explicit)
        if weights >= usable:
            raise CatalogError(
                f"model: {what} needs {weights / 1e9:.1f} GB of weights per device at "
                f"tensor_parallel={self.tp}, but {self.hw.name} has {self.hw.hbm_bytes / 1e9:.0f} "
                f"GB x memory_fraction {fraction:g} = {usable / 1e9:.1f} GB usable; raise "
                "tensor_parallel, quantize, or pick a larger accelerator")
        blocks = int((usable - weights) // (kv_per_token * self.block_size))
        if blocks < 2:
            raise CatalogError(f"model: {what} leaves no room for the KV cache on {self.hw.name} "
                               f"(weights {weights / 1e9:.1f} GB of {usable / 1e9:.1f} GB usable)")
        return blocks


class Simulation:
    """One run of one scenario: SimPy environment, workers, router, arrival process."""

    def __init__(self, sc: Scenario, trace: pd.DataFrame, base_dir: Path,
                 progress: Any = None, deployment: Deployment | None = None) -> None:
        d = deployment if deployment is not None else Deployment(sc, base_dir)
        self.sc, self.deployment = sc, d
        self.notes = list(d.notes)
        self.seed = d.seed
        self.hw, self.model, self.tp, self.n_workers = d.hw, d.model, d.tp, d.n_workers
        self.calibration, self.precision, self.target = d.calibration, d.precision, d.target
        self.method, self.drafter, self.controller = d.method, d.drafter, d.controller
        self.overlap_draft, self.acceptance = d.overlap_draft, d.acceptance
        self.block_size, self.kv_blocks = d.block_size, d.kv_blocks
        self.kv_cache = d.kv_cache
        self.price, self.power_idle, self.power_max = d.price, d.power_idle, d.power_max
        self.peak_flops, self.hbm_bw = d.peak_flops, d.hbm_bw
        # --- requests: the memory check comes before any per-request array
        limits.check_requests(len(trace), workload_key(sc),
                              record_iterations=bool(sc["simulation"]["record_iterations"]))
        self._context_notes(trace)
        self.table = rq.RequestTable(trace)
        self._prepare_requests()
        # --- SimPy model
        s = sc["scheduler"]
        self.max_queue = s["max_queue"]
        self.horizon = sc["simulation"]["horizon_s"]
        self.record_iterations = sc["simulation"]["record_iterations"]
        self.env = simpy.Environment()
        kc = self.kv_cache
        # iteration-log columns after ITER_COLUMNS: the KV tiers' use (kv_cache on), then
        # the speculative KV blocks each step took and returned (a scenario that drafts)
        self.spec_columns = self.method != "none" and not isinstance(self.drafter, NoDrafter)
        self.metrics = Metrics(extra=(
            *(() if kc is None else ("kv_cached_blocks", *(f"kv_{t.name}_blocks"
                                                          for t in kc.tiers), "kv_transfer_s")),
            *(SPEC_ITER_COLUMNS if self.spec_columns else ())))
        if kc is not None:  # per-request prefix-cache columns, read by the kernel and KV
            t = self.table
            t.kv_shared = np.zeros(t.n, np.int64)
            t.kv_hit_tokens = np.zeros(t.n, np.int64)
            t.kv_xfer_s = np.zeros(t.n)
            keys = pc.PrefixKeys(t, self.block_size)
        closed = trace.attrs.get("closed_loop")
        self.arrivals = (ClosedLoop(self, closed, self.seed) if closed is not None
                         else OpenLoop(self))
        executor = Executor(self.target, self.drafter, self.overlap_draft,
                            speculating=self.method != "none" and sc["speculation"]["k"] > 0)
        pctx = self.controller.ctx  # what adaptive policies read: classes, priors, pricing
        pctx.executor = executor
        pctx.class_names = list(getattr(self.acceptance, "_names", []) or [])
        pctx.class_alpha = (np.asarray(self.alpha_table[:, 0], np.float64) if self.table.n
                            else np.zeros(1))
        multi_step = bool(sc["simulation"]["fast_path"])
        sched_cls = BATCH_SCHEDULERS.get(s["policy"])
        self.workers = []
        for i in range(self.n_workers):
            kernel = Kernel(self.table, executor, self.acceptance, self.alpha_table,
                            self.drafter, self.block_size, self.kv_blocks,
                            compiled=sc["simulation"]["compiled"])
            if kc is None:
                kv = BlockAllocator(self.kv_blocks, self.block_size)
            else:
                kv = pc.PrefixKV(self.kv_blocks, self.block_size, self.table, keys, kc)
                kernel.shared = self.table.kv_shared
            ledger = Ledger(self.tp, self.peak_flops, self.hbm_bw, self.power_idle,
                            self.power_max)
            self.workers.append(Worker(
                i, self.env, self.table,
                sched_cls(s["max_batch"], s["token_budget"], s["chunked_prefill"],
                          s["max_queue"]),
                kernel, kv, self.controller,
                self.drafter, ledger, self.metrics, multi_step=multi_step,
                record_iterations=self.record_iterations, on_finish=self.on_finish,
                arrival_hint=self.next_arrival_hint,
                notify_finishes=self.arrivals.notify_finishes,
                eviction=EVICTION.get(s["preemption"])()))
        self.router = make_router(sc["router"]["policy"], self.n_workers)
        self.progress = progress
        self.rejected_reasons: dict[str, int] = {}
        self.next_rid = 0  # requests before this one have arrived (or been sent)
        self._plan_arrivals()
        self.pd = None
        if d.pools is not None:  # prefill/decode pools (cluster/pd.py): the workers above
            from specsim.simulator.cluster.pd import PDCluster  # are the decode pool

            self.pd = PDCluster(self, d.pools)
        self.overload: dict[str, Any] | None = None  # set when the watch stops the run
        self.watch = make_watch(self, sc["simulation"]["overload"])
        self.env.process(self.arrivals.process())

    def _context_notes(self, trace: pd.DataFrame) -> None:
        """Requests the workload cut or dropped to fit the context (``build_workload`` attrs;
        a trace passed in directly has none: 0)."""
        attrs = getattr(trace, "attrs", None) or {}

        def count(key: str) -> int:
            try:
                return max(int(attrs.get(key) or 0), 0)
            except (TypeError, ValueError):
                return 0

        self.truncated = count("capped_requests")
        self.dropped = count("dropped_requests")
        if self.truncated:
            self.notes.append(f"{self.truncated} requests were longer than the context limit and "
                              "were truncated to fit (workload.context_overflow: truncate); they "
                              "run, and count as completed, at the shorter length")
        if self.dropped:
            self.notes.append(f"{self.dropped} requests were longer than the context limit and "
                              "were dropped before the run (workload.context_overflow: drop); "
                              "they are not counted as arrived")

    def _prepare_requests(self) -> None:
        t = self.table
        ids = t.request_id
        t.accept_key = rng.request_keys(self.seed, rng.STREAM_ACCEPT, ids)
        t.match_key = rng.request_keys(self.seed, rng.STREAM_MATCH, ids)
        if t.n and isinstance(self.drafter, PerClassDrafter):  # each class its drafter's
            t.cls_idx, t.alpha_scale, self.alpha_table, names = self.drafter.request_tables(
                ids, t.workload_class, t.temperature)
            self.acceptance._names = names  # the class order the policy and metrics read
        elif t.n:
            t.cls_idx, t.alpha_scale = self.acceptance.request_scale(ids, t.workload_class,
                                                                     t.temperature)
            self.alpha_table = self.acceptance.survival_table()
            # a drafter's proposals may meet the target differently from the chain (a tree)
            self.alpha_table = self.drafter.transform_acceptance(self.alpha_table)
        else:
            self.alpha_table = np.zeros((1, 64))

    # ------------------------------------------------------------------ processes
    def _reject(self, rid: int, reason: str) -> None:
        self.table.status[rid] = rq.REJECTED
        self.rejected_reasons[reason] = self.rejected_reasons.get(reason, 0) + 1

    def arrive(self, rid: int) -> None:
        """A request arrives now: rejected for its size, routed, or refused by a full queue."""
        why = self._static_reject[rid]
        if why:
            self._reject(rid, self.STATIC_REASONS[why])
        else:
            w = self._route(rid)
            if self.max_queue is not None and len(w.waiting) >= self.max_queue:
                self._reject(rid, "queue full")
            else:
                w.submit(rid)
        if self.progress is not None and rid % 256 == 0:
            self.progress(self.env.now, rid + 1)
        if self.watch is not None:
            self.watch.on_arrival(rid)

    STATIC_REASONS = {1: "exceeds model context", 2: "exceeds KV capacity"}

    def _plan_arrivals(self) -> None:
        """Rejections decided by a request alone (too long for the context or the KV cache)."""
        t = self.table
        total = t.prompt + t.output
        why = np.zeros(t.n, np.int8)
        why[-(-total // self.block_size) > self.kv_blocks - 1] = 2
        why[total > self.model.max_context] = 1
        self._static_reject = why
        self._eligible = np.flatnonzero(why == 0)  # requests that will be routed

    def next_arrival_hint(self, wid: int) -> float | None:
        """When worker ``wid`` may next receive a request (a planning hint, not a promise)."""
        t = self.table
        if self.arrivals.notify_finishes:
            return None  # closed-loop arrivals depend on finishes: no foresight
        j = int(self._eligible.searchsorted(self.next_rid))
        ahead = self.router.turns_until(wid)
        j += ahead if ahead is not None else 0
        return float(t.arrival[self._eligible[j]]) if j < len(self._eligible) else float("inf")

    def _route(self, rid: int) -> Worker:
        """Ask the router; a router that reads load sees every worker synced to now."""
        if self.pd is not None:  # PD: the prefill pool (or a decode worker, conditionally)
            return self.pd.route(rid)
        if len(self.workers) == 1:  # no choice to make (and nothing a router records)
            return self.workers[0]
        t, now = self.table, self.env.now
        snaps = None
        if self.router.reads_load:
            for w in self.workers:
                w.sync(now)
            snaps = [w.snapshot() for w in self.workers]
        req = RequestFeatures(rid, int(t.prompt[rid]), int(t.output[rid]),
                              str(t.workload_class[rid]), int(t.session_id[rid]),
                              str(t.slo_tier[rid]))
        decision = self.router.route(req, snaps)
        return self.workers[decision.worker]

    def on_finish(self, rows: np.ndarray) -> None:
        self.arrivals.on_done(rows)

    # ------------------------------------------------------------------ running
    def run(self) -> None:
        try:
            if self.horizon is not None:
                self.env.run(until=self.horizon)
            else:
                self.env.run()
        except Overloaded as stop:  # a queue that only grows: stop here, as at a horizon
            self.overload = stop.info
            self.notes.append(
                f"overloaded: stopped at {stop.info['at_s']:.0f} s simulated with "
                f"{stop.info['queued_requests']:,} requests queued (arrivals "
                f"{stop.info['arrival_rate_per_s']:.2f}/s vs completions "
                f"{stop.info['completion_rate_per_s']:.2f}/s; {stop.info['rule']}); the "
                "figures cover the run until then (simulation.overload.detect: false runs on)")
        end = self.overload["at_s"] if self.overload is not None else self.horizon
        if end is not None:
            for w in self.workers:  # iterations that ended before the stop count
                w.sync(end, strict=True)

    def _speculative_kv(self) -> dict[str, Any]:
        """Speculative KV blocks, in total and per worker (index = worker id): ``allocated``,
        the blocks decode steps took above what their rows held, for their draft + bonus
        tokens; ``freed_rejected``, of them, those that held only rejected drafts and were
        returned after the step; ``committed`` = allocated - freed_rejected, kept for the
        accepted + bonus tokens. A row's finishing step frees everything and is not
        counted."""
        taken = [int(w.spec_blocks_taken) for w in self.workers]
        freed = [int(w.spec_blocks_freed) for w in self.workers]
        kept = [a - f for a, f in zip(taken, freed, strict=True)]
        return {"allocated": sum(taken), "freed_rejected": sum(freed), "committed": sum(kept),
                "per_worker": {"allocated": taken, "freed_rejected": freed,
                               "committed": kept}}

    def arrived(self) -> np.ndarray:
        """The requests that arrived in the run (one rule for the summary and the checks):
        all of them, or those at or before a horizon; where the overload watch stopped the
        run at an arrival, those before that instant and those processed at it."""
        t, now = self.table, float(self.env.now)
        if self.overload is not None:
            return (t.arrival < now) | (t.status != rq.PENDING)
        if self.horizon is not None:
            return t.arrival <= now
        return np.ones(t.n, bool)

    def summary(self, wall_s: float) -> dict[str, Any]:
        t, sc = self.table, self.sc
        now = float(self.env.now)
        arrived = int(np.count_nonzero(self.arrived()))
        done = t.status == rq.DONE
        rejected = int((t.status == rq.REJECTED).sum())
        out_tokens = int(t.generated.sum())
        ttft = t.first_token - t.arrival
        tpot = np.where(done, metrics_tpot(t.first_token, t.finish, t.generated), np.nan)
        e2e = np.where(done, t.finish - t.arrival, np.nan)
        slo = sc["slo"]
        _, _, good = slo_attainment(done, ttft, tpot, slo["ttft_s"], slo["tpot_s"])
        window = now if now > 0 else float("nan")
        steps = int(t.steps.sum())
        decode_tokens = int((t.accepted + t.bonus).sum() - (t.first_token == t.first_token).sum())
        busy = sum(w.ledger.busy_s for w in self.workers)
        draft_s = sum(w.ledger.draft_s for w in self.workers)
        verify_s = sum(w.ledger.verify_s for w in self.workers)
        devices = self.n_workers * self.tp
        idle_s = max(self.n_workers * now - busy, 0.0)
        energy = sum(w.ledger.energy_j for w in self.workers) + idle_s * self.tp * self.power_idle
        cost = devices * self.price * now / 3600.0
        kv_peak = max((w.kv.peak for w in self.workers), default=0) / max(self.kv_blocks, 1)
        drafted = int(t.drafted.sum())
        cal = self.calibration
        out = {
            **({"overload": self.overload} if self.overload is not None else {}),
            "scenario": sc["name"],
            "seed": self.seed,
            "requests_arrived": arrived,
            "requests_completed": int(done.sum()),
            "requests_rejected": rejected,
            "requests_in_flight": arrived - int(done.sum()) - rejected,
            "rejected_by_reason": dict(sorted(self.rejected_reasons.items())),
            "requests_truncated_to_context": self.truncated,
            "requests_dropped_for_context": self.dropped,
            "output_tokens": out_tokens,
            "accepted_tokens": int(t.accepted.sum()),
            "bonus_tokens": int(t.bonus.sum()),
            "drafted_tokens": drafted,
            "ttft_s": dist(ttft[done]),
            "tpot_s": dist(tpot),
            "itl_s": self.metrics.itl.summary(),
            "e2e_s": dist(e2e),
            "throughput_output_tokens_per_s": out_tokens / window,
            "goodput_requests_per_s": int(good.sum()) / window,
            "slo": {"ttft_s": slo["ttft_s"], "tpot_s": slo["tpot_s"]},
            "mean_acceptance_length": (decode_tokens / steps) if steps else 1.0,
            "acceptance_rate": (int(t.accepted.sum()) / drafted) if drafted else 0.0,
            "draft_time_fraction": float(draft_s / busy) if busy else 0.0,
            "verify_time_fraction": float(verify_s / busy) if busy else 0.0,
            "busy_fraction": busy / (self.n_workers * now) if now else 0.0,
            "kv_peak_utilization": kv_peak,
            "kv_blocks_per_worker": self.kv_blocks,
            "kv_blocks_used_at_end": int(sum(w.kv.held for w in self.workers)),
            "preemptions": int(sum(w.preemptions for w in self.workers)),
            "speculative_kv_blocks": self._speculative_kv(),
            "iterations": int(sum(w.ledger.iterations for w in self.workers)),
            "cost_usd_per_million_output_tokens": cost / out_tokens * 1e6 if out_tokens else None,
            "energy_j_per_output_token": energy / out_tokens if out_tokens else None,
            "fleet": {
                "accelerator": self.hw.name, "devices": devices, "workers": self.n_workers,
                "tensor_parallel": self.tp, "price_usd_per_device_hour": self.price,
                "price_date": self.hw.price_date, "cost_usd": cost, "energy_j": energy,
                "power_idle_w": self.power_idle, "power_max_w": self.power_max,
                "average_power_w": energy / now if now else 0.0,
            },
            "model": self.model.name,
            "speculation": {"method": self.method, "k": sc["speculation"]["k"],
                            "policy": self.controller.name, "drafter": self.drafter.describe(),
                            "acceptance_profile": self.acceptance.name,
                            **self._speculation_metrics(busy)},
            "simulated_time_s": now,
            "wall_time_s": wall_s,
            "calibration": cal.name if cal.calibrated else UNCALIBRATED,
            "calibration_values": {**cal.values(), "source": cal.source},
            "hardware_calibrated": bool(cal.calibrated and cal.hardware == self.hw.name),
            "notes": list(self.notes),
        }
        if self.kv_cache is not None:  # only with kv_cache: other runs' metrics as before
            out["kv_cache"] = pc.summary(self)
        if self.pd is not None:  # PD: the fleet sums the pools; the link's numbers
            self.pd.amend_summary(out, now)
        return out

    def _speculation_metrics(self, busy: float) -> dict[str, Any]:
        """Where the busy time and energy went (accepted, bonus, wasted, prompt work), the
        accepted-length histogram per class and the policy's decisions."""
        from specsim.simulator.cluster.worker import WORK_KINDS

        work_s = {k: sum(w.ledger.work_s[k] for w in self.workers) for k in WORK_KINDS}
        work_j = {k: sum(w.ledger.work_j[k] for w in self.workers) for k in WORK_KINDS}
        out: dict[str, Any] = {
            "work_s": work_s, "work_j": work_j,
            "wasted_time_fraction": work_s["wasted"] / busy if busy else 0.0,
            "wasted_energy_fraction": (work_j["wasted"] / sum(work_j.values())
                                       if any(work_j.values()) else 0.0)}
        hists = [w.kernel.accept_hist for w in self.workers if w.kernel.accept_hist is not None]
        if hists:
            h = np.sum(hists, axis=0)
            names = list(getattr(self.acceptance, "_names", []) or [])
            kmax = int(np.flatnonzero(h.sum(axis=0)).max()) + 1 if h.any() else 0
            out["accepted_per_step_histogram"] = {
                names[i] if i < len(names) else str(i): [int(x) for x in h[i, :kmax]]
                for i in range(h.shape[0]) if h[i].any()}
        codes = {c: r for r, c in self.metrics.reasons.items()}
        decisions: dict[str, int] = {}
        for w in self.workers:
            for c, n in w.kernel.reason_iterations.items():
                decisions[codes.get(c, str(c))] = decisions.get(codes.get(c, str(c)), 0) + n
        out["policy_decisions"] = dict(sorted(decisions.items(), key=lambda kv: -kv[1])[:20])
        out["policy_changes"] = int(sum(w.kernel.reason_changes for w in self.workers))
        switches = [e for w in self.workers for e in getattr(w.policy, "switches", [])]
        if isinstance(self.drafter, PerClassDrafter) and self.drafter.fallback is not None:
            # drafter switching (per_class.py rule 4): each switch, in time order
            switches.sort(key=lambda e: (e["time_s"], e["worker"]))
            out["drafter_switch_count"] = len(switches)
            out["drafter_switches"] = switches[:200]
        return out

    def check_invariants(self) -> None:
        """Conservation checks (also run by tests): KV blocks, tokens, request states."""
        t = self.table
        for w in self.workers:
            held = int(t.blocks[t.worker == w.wid].sum())
            if held != w.kv.held:
                raise AssertionError(f"worker {w.wid}: allocator has {w.kv.held} blocks held, "
                                     f"requests hold {held}")
        if not np.array_equal(t.generated, t.accepted + t.bonus):
            raise AssertionError("output tokens != accepted + bonus tokens")
        if self.kv_cache is not None:  # every tier: blocks free or cached; tokens conserved
            pc.check_invariants(self)
        if self.pd is not None:  # PD: arrivals accounted for, tokens over the link, no leak
            self.pd.check(self.arrived())


def load_scenario(source: str | Path | dict[str, Any], overrides: Any = None,
                  seed: int | None = None) -> tuple[dict[str, Any], Path, str]:
    """Raw YAML/dict -> validated scenario, the folder paths resolve from, and its origin."""
    if isinstance(source, dict):
        raw, base, origin = source, Path.cwd(), "scenario"
    else:
        path = Path(source)
        raw, base, origin = cfg.read_yaml(path), path.resolve().parent, str(path)
    with in_file(origin):
        raw = cfg.apply_overrides(raw, overrides)
        if seed is not None:
            raw["seed"] = seed
        sc = cfg.validate(raw)
        cfg.check_consistency(sc)
        if sc["workload"] is None:
            raise ScenarioError("workload: required (a trace file or a synthetic generator)")
    return sc, base, origin


@contextlib.contextmanager
def in_file(origin: str):
    """Re-raise user errors with the scenario file named first (once)."""
    try:
        yield
    except USER_ERRORS as exc:
        msg = str(exc)
        if origin != "scenario" and not msg.startswith(origin):
            msg = f"{origin}: {msg}"
        raise type(exc)(msg) from None


def workload_key(sc: dict[str, Any]) -> str:
    """The scenario key the request count comes from, for messages."""
    wl = sc.get("workload")
    if isinstance(wl, dict):
        for name in ("synthetic", "trace"):
            if name in wl:
                return f"workload.{name}"
    return "workload"


def build_trace(sc: dict[str, Any], base: Path, max_context: int) -> pd.DataFrame:
    from specsim.traces.workload import build_workload

    return build_workload(sc["workload"], base, int(sc["seed"]), max_context)


def run_scenario(source: str | Path | dict[str, Any], *, seed: int | None = None,
                 overrides: Any = None, trace: pd.DataFrame | None = None,
                 progress: Any = None, check: bool = True,
                 stream_to: str | Path | None = None) -> Result:
    """Validate, build and run a scenario; the Python API behind ``specsim run``.

    Errors in the input raise ScenarioError / CatalogError / TraceError with one-line
    messages naming the file and key. ``trace`` bypasses the scenario's workload section.
    ``stream_to``: a folder the iteration log is streamed into as the run goes
    (``simulation.iteration_log`` says the format); the result then holds no iterations
    frame (``iterations`` is None) and memory stays flat.
    """
    origin = str(source) if not isinstance(source, dict) else "scenario"
    with in_file(origin):
        sc, base, origin = load_scenario(source, overrides, seed)
        if trace is None:
            model = get_model(sc["model"], "model")
            trace = build_trace(sc, base, model.max_context)
        sim = Simulation(sc, trace, base, progress)
    log = None
    if stream_to is not None:
        from specsim.simulator.metrics.iteration_log import CHUNK_ROWS, open_log

        log = open_log(sc["simulation"]["iteration_log"], Path(stream_to))
        sim.metrics.stream_to(log, CHUNK_ROWS)
    try:
        t0 = time.perf_counter()
        sim.run()
        wall = time.perf_counter() - t0
    except BaseException:
        if log is not None:
            log.close()
        raise
    if check:
        sim.check_invariants()
    metrics = sim.summary(wall)
    if log is not None:
        if not sim.record_iterations:
            sim.metrics._n = 0  # no rows, but the columns
        sim.metrics.finish_stream()
        iters = None
    else:
        iters = sim.metrics.iterations_frame()
        if not sim.record_iterations:  # no rows, but the columns (the log keeps its header)
            iters = iters.iloc[:0]
    frame = sim.table.frame()
    if sim.kv_cache is not None:  # per request: prompt tokens found cached, transfer time
        frame["prefix_hit_tokens"] = sim.table.kv_hit_tokens
        frame["kv_transfer_s"] = sim.table.kv_xfer_s
    if sim.pd is not None:  # PD: where each request was prefilled, its KV transfer
        sim.pd.amend_frame(frame)
    return Result(metrics, frame, iters, sc.dump(), sim.notes)


def finite_or_none(x: Any) -> Any:
    """JSON has no NaN: turn non-finite floats into null, recursively."""
    if isinstance(x, dict):
        return {k: finite_or_none(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [finite_or_none(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return finite_or_none(float(x))
    return x
