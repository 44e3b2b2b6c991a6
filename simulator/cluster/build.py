"""Scenario -> Fleet: the pools a scenario deploys, their workers and routers, and the links
between them.

A pool is workers of one deployment (hardware, TP, model, drafter, KV; ``deployment.py``)
with one role: ``mixed`` (prefill and decode on the same worker), ``prefill`` (stops at the
first token and hands the request over a link) or ``decode`` (receives requests whose KV
came over a link). A scenario without ``disaggregation`` is one mixed pool; with it, a
prefill pool, one decode pool (``disaggregation.decode``, named ``decode``) or several
(``disaggregation.decode_pools``, a list, each named), and one KV link from the prefill
pool to the decode pools (``cluster/pd.py``), each pool on its own hardware if the scenario
says so. Worker ids run over the pools in order (the prefill pool first, then the decode
pools in list order), so ``router.policy`` indexes the pool arrivals enter as it would a
mixed fleet.

``deploy`` resolves the pools (no trace, no simulation: ``specsim validate`` and planners);
``build_workers`` makes a pool's workers for a run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specsim.cost_models.catalog import get_hardware, power_curve
from specsim.cost_models.errors import CatalogError
from specsim.errors import ScenarioError
from specsim.simulator.cluster.deployment import Deployment, workers_of
from specsim.simulator.cluster.worker import Ledger, Worker
from specsim.simulator.execution.executor import Executor
from specsim.simulator.execution.kernel import Kernel, state_offsets
from specsim.simulator.execution.loop_rules import admission_blocks
from specsim.simulator.kv import prefix_cache as pc
from specsim.simulator.kv.blocks import BlockAllocator
from specsim.simulator.kv.eviction import Newest  # noqa: F401  (registers the eviction policies)
from specsim.simulator.registry import EVICTION, ROUTERS
from specsim.simulator.routing.routers import Router
from specsim.simulator.scheduling.batching import make_scheduler  # (registers "fcfs")
from specsim.traces.errors import TraceError

MIXED, PREFILL, DECODE = "mixed", "prefill", "decode"
_USER_ERRORS = (ScenarioError, CatalogError, TraceError)
#: a PD pool key and the scenario key it falls back to
_FALLBACK = {"accelerator": "hardware.accelerator",
             "tensor_parallel": "hardware.tensor_parallel",
             "memory_fraction": "hardware.memory_fraction",
             "price_usd_per_hour": "cost.price_usd_per_hour",
             "power_idle_w": "cost.power_idle_w",
             "power_max_w": "cost.power_max_w",
             "calibration": "calibration"}


@dataclass
class Pool:
    """Workers of one deployment with one role. ``router_policy`` places requests on its
    workers (``router.policy`` where arrivals enter, ``disaggregation.decode_router`` on a
    decode pool); ``workers`` and ``router`` are filled when a run builds it; ``first_wid``
    is its first worker's id in the fleet."""

    name: str
    role: str
    deployment: Deployment
    router_policy: str
    first_wid: int = 0
    router_params: dict[str, Any] | None = None  # router.params (arrivals' pool only)
    workers: list[Worker] = field(default_factory=list)
    router: Router | None = None

    @property
    def only_worker_reason(self) -> str:
        """requests.csv's route reason for a request sent to a pool of one worker (no router
        is asked): the SimPy run's (``Simulation.route_in``) and the solo loop's."""
        return f"the {self.name} pool's only worker"

    def too_big(self, prompt: np.ndarray, output: np.ndarray) -> np.ndarray:
        """Requests whose KV can never fit one of this pool's workers (one block spare)."""
        d = self.deployment
        tokens = prompt + (1 if self.role == PREFILL else output)
        return admission_blocks(tokens, d.block_size, d.state_blocks) > d.kv_blocks


@dataclass(frozen=True)
class Link:
    """A KV link from pool ``source`` to the pools ``targets`` (``disaggregation.link``; the
    hand-off picks one target per request): bandwidth in bytes per second, latency per
    transfer, one link for the fleet (``shared``) or one per source worker;
    ``bytes_per_token``: the KV a transferred token carries (target + drafter, all of a
    worker's devices); ``kv``: for a model with layer kinds, the per-sequence sizes a
    transfer moves (``sequence_bytes``: full KV per token, the window's KV, the linear
    layers' state once; ``Deployment.kv_worker``), None otherwise."""

    source: str
    targets: tuple[str, ...]
    bandwidth_bytes_s: float
    latency_s: float
    shared: bool
    bytes_per_token: float
    config: Any  # the scenario's link section, as given (reported back)
    kv: Any = None  # cost_models.catalog.KVSizes of one worker, for a model with layer kinds

    def transfer_bytes(self, tokens: float) -> float:
        """Bytes one request of ``tokens`` cached tokens sends over the link."""
        if self.kv is None:
            return tokens * self.bytes_per_token
        return self.kv.sequence_bytes(tokens)


@dataclass
class Fleet:
    """The pools (in worker-id order) and the links between them."""

    sc: Any
    pools: list[Pool]
    links: list[Link]
    notes: list[str]

    @property
    def deployment(self) -> Deployment:
        """The (first) pool that decodes: the model, speculation and acceptance every
        request is drawn with (the scenario's, so every decode pool's), and what the run's
        single-valued metrics report."""
        return next(p for p in self.pools if p.role != PREFILL).deployment

    @property
    def model(self) -> Any:
        return self.deployment.model

    @property
    def entry(self) -> Pool:
        """The pool arrivals are routed to."""
        return self.pools[0]

    @property
    def workers(self) -> list[Worker]:
        return [w for p in self.pools for w in p.workers]

    def pool(self, name: str) -> Pool:
        return next(p for p in self.pools if p.name == name)


# ---------------------------------------------------------------- resolving the pools


def deploy(sc: Any, base_dir: Path) -> Fleet:
    """The fleet a scenario deploys, every pool resolved against the catalogs (no workers
    yet). Errors name the scenario key the bad value came from."""
    dis = sc.disaggregation
    if dis is None:
        d = Deployment(sc, base_dir)
        return Fleet(sc, [Pool(MIXED, MIXED, d, sc.router.policy,
                                router_params=sc.router.params)], [], list(d.notes))
    hw = sc.hardware
    given = pd_pools(dis)
    for _name, key, pool in given:  # each pool whole workers, before the pools are added
        tp = pool.tensor_parallel if pool.tensor_parallel is not None else hw.tensor_parallel
        workers_of(pool.count, tp, f"{key}.count",
                   None if pool.tensor_parallel is not None else "hardware.tensor_parallel")
    total = unit_devices(sc)
    if "count" in hw.model_fields_set and hw.count != total:
        raise ScenarioError(f"hardware.count: {hw.count} devices, but the disaggregation "
                            f"pools have {' + '.join(str(p.count) for _, _, p in given)} "
                            f"= {total} (give their sum, or leave hardware.count out)")
    pools, first = [], 0
    for name, key, pool in given:
        if pool.accelerator is not None:  # the key is named as the pool's
            get_hardware(pool.accelerator, f"{key}.accelerator")
        try:
            d = Deployment(pool_scenario(sc, pool), base_dir)
        except _USER_ERRORS as exc:
            raise type(exc)(_rekey(str(exc), key, pool)) from None
        role = PREFILL if name == PREFILL else DECODE
        router = sc.router.policy if role == PREFILL else dis.decode_router
        pools.append(Pool(name, role, d, router, first,
                          router_params=sc.router.params if role == PREFILL else None))
        first += d.n_workers
    if len(pools) > 2 and not ROUTERS.get(dis.decode_router).reads_load:
        raise ScenarioError(f"disaggregation.decode_router: {dis.decode_router} does not read "
                            "the workers' load; over several decode pools the hand-off offers "
                            "the router the workers of the pools that can hold each request, "
                            "so it must (e.g. least_loaded, least_loaded_per_kv)")
    pf = pools[0].deployment
    link = dis.link
    links = [Link(PREFILL, tuple(p.name for p in pools[1:]), float(link.bandwidth_gb_s) * 1e9,
                  float(link.latency_s), bool(link.shared),
                  float(pf.kv_bytes_per_token_device * pf.tp) if pf.kv_worker is None
                  else float(pf.kv_worker.full_per_token), link, pf.kv_worker)]
    return Fleet(sc, pools, links, _pd_notes(pools, link))


def pd_pools(dis: Any) -> list[tuple[str, str, Any]]:
    """A disaggregation section's pools in worker-id order, as (name, scenario key, section):
    the prefill pool, then ``decode`` (named ``decode``) or each of ``decode_pools``."""
    out = [(PREFILL, "disaggregation.prefill", dis.prefill)]
    if dis.decode_pools is None:
        return [*out, (DECODE, "disaggregation.decode", dis.decode)]
    return [*out, *((p.name, f"disaggregation.decode_pools.{i}", p)
                    for i, p in enumerate(dis.decode_pools))]


def unit_devices(sc: Any) -> int:
    """Devices of the smallest fleet of this scenario's shape (a planner's replica): one
    worker of a mixed pool (its tensor_parallel devices), or every pool of a disaggregated
    fleet (their counts, which are devices, added: the prefill pool and every decode
    pool)."""
    dis = sc.disaggregation
    if dis is None:
        return int(sc.hardware.tensor_parallel)
    return int(sum(p.count for _, _, p in pd_pools(dis)))


def pool_scenario(sc: Any, pool: Any) -> Any:
    """The scenario one pool (its ``disaggregation`` section) runs: ``hardware``, ``cost``
    and ``calibration`` from the pool (falling back to the scenario's own), no
    ``disaggregation``."""
    hw = sc.hardware
    tp = pool.tensor_parallel if pool.tensor_parallel is not None else hw.tensor_parallel
    hw_up = {"count": pool.count, "tensor_parallel": tp}
    for key in ("accelerator", "memory_fraction"):
        if getattr(pool, key) is not None:
            hw_up[key] = getattr(pool, key)
    cost_up = {k: getattr(pool, k) for k in ("price_usd_per_hour", "power_idle_w", "power_max_w")
               if getattr(pool, k) is not None}
    own = {"calibration": pool.calibration} if pool.calibration is not None else {}
    return sc.model_copy(update={"hardware": hw.model_copy(update=hw_up),
                                 "cost": sc.cost.model_copy(update=cost_up),
                                 "disaggregation": None, **own})


def _rekey(msg: str, where: str, pool: Any) -> str:
    """A pool's Deployment names ``hardware.*`` / ``cost.*`` keys: name the key the value
    came from (the pool's own at ``where``, or the scenario's section it fell back to)."""
    for key, fallback in _FALLBACK.items():
        if msg.startswith(fallback) and getattr(pool, key) is not None:
            return f"{where}.{key}" + msg[len(fallback):]
    if msg.startswith("hardware.count"):
        return f"{where}.count" + msg[len("hardware.count"):]
    if msg.startswith(("hardware.", "cost.")):
        return msg
    return f"{where}: {msg}"


def _pd_notes(pools: list[Pool], link: Any) -> list[str]:
    """Every pool's notes once each (a note not every pool has names its pool) and the
    link's."""
    notes: list[str] = []
    for pool in pools:
        others = [o.deployment.notes for o in pools if o is not pool]
        for n in pool.deployment.notes:
            if not all(n in o for o in others):
                n = f"{pool.name} pool: {n}"
            if n not in notes:
                notes.append(n)
    if not ({"bandwidth_gb_s", "latency_s"} <= link.model_fields_set):
        notes.append(f"disaggregation.link: {link.bandwidth_gb_s:g} GB/s and "
                     f"{link.latency_s * 1e6:g} us per transfer; defaults are assumed (one "
                     "400 Gb/s RDMA port, e.g. InfiniBand NDR): set your fabric's")
    return notes


# ---------------------------------------------------------------- a pool's workers


def build_workers(pool: Pool, sim: Any, table: Any, on_finish: Any,
                  arrival_hint: Any) -> list[Worker]:
    """A pool's workers for a run: scheduler, executor, kernel, KV pool and ledger each,
    over ``table`` (the request table, or the view the pool sees). Acceptance and its table
    are the fleet's (every request is drawn once); drafter, policy and prices the pool's."""
    d, sc = pool.deployment, sim.sc
    s = sc.scheduler
    executor = Executor(d.target, d.drafter, d.overlap_draft, speculating=d.speculating)
    pctx = d.controller.ctx  # what adaptive policies read: classes, priors, pricing
    pctx.executor = executor
    pctx.class_names = list(getattr(sim.acceptance, "_names", []) or [])
    pctx.class_alpha = (np.asarray(sim.alpha_table[:, 0], np.float64) if sim.table.n
                        else np.zeros(1))
    kc = d.kv_cache
    keys = pc.PrefixKeys(sim.table, d.block_size) if kc is not None else None
    # every row's blocks count its state: -(state tokens) shared (read-only, one for the pool)
    states = (state_offsets(table.n, d.state_blocks * d.block_size)
              if kc is None and d.state_blocks else None)
    workers = []
    for i in range(d.n_workers):
        kernel = Kernel(table, executor, sim.acceptance, sim.alpha_table, d.drafter,
                        d.block_size, d.kv_blocks, compiled=sc.simulation.compiled)
        if kc is None:
            kv = BlockAllocator(d.kv_blocks, d.block_size, d.state_blocks)
            if states is not None:
                kernel.shared = states
        else:
            kv = pc.PrefixKV(d.kv_blocks, d.block_size, table, keys, kc)
            kernel.shared = sim.table.kv_shared
        ledger = Ledger(d.tp, d.peak_flops, d.hbm_bw, d.power_idle, d.power_max,
                        power_curve(d.hw.name))
        workers.append(Worker(
            pool.first_wid + i, sim.env, table,
            make_scheduler(sc),
            kernel, kv, d.controller, d.drafter, ledger, sim.metrics,
            multi_step=bool(sc.simulation.fast_path),
            record_iterations=sim.record_iterations, on_finish=on_finish,
            arrival_hint=arrival_hint, notify_finishes=sim.arrivals.notify_finishes,
            eviction=EVICTION.get(s.preemption)()))
    return workers
