"""One pool's deployment: a scenario resolved against the catalogs.

Hardware, model, calibration, cost models, drafter, speculation policy, acceptance, KV
blocks per worker, the KV cache's tiers, price and power, with every rule that spans keys
checked. No trace and no simulation: ``specsim validate`` and planners build this alone;
``cluster/build.py`` builds one per pool of a fleet (a pool's scenario is the scenario with
its ``hardware`` and ``cost``, see ``build.pool_scenario``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from specsim import limits
from specsim.cost_models import routing
from specsim.cost_models.calibration import (
    UNCALIBRATED_REF,
    Calibration,
    default_profile,
    load_profile,
    uncalibrated_default,
)
from specsim.cost_models.catalog import KVSizes, get_hardware, get_model, get_precision
from specsim.cost_models.errors import CatalogError
from specsim.cost_models.roofline import ForwardCostModel
from specsim.errors import ScenarioError
from specsim.simulator.kv import prefix_cache as pc
from specsim.simulator.scenario.schema import SAMPLED, Scenario
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

#: GB/s per device of a KV tier with no link given or in the catalog (assumed: a PCIe Gen5
#: x16 host link's practical copy rate)
ASSUMED_TIER_GB_S = 25.0


def workers_of(count: int, tp: int, key: str, tp_key: str | None = None) -> int:
    """The workers ``count`` devices make at ``tp`` devices each (the one rule: a worker is a
    whole tensor-parallel group). ``tp_key``: where tp came from, when not beside ``key``."""
    if count % tp:
        raise ScenarioError(f"{key}: expected a multiple of tensor_parallel "
                            f"({tp}{f', from {tp_key}' if tp_key else ''}), got {count}")
    return count // tp


class Deployment:
    """One pool resolved: ``n_workers`` workers of ``tp`` devices of ``hw`` serving
    ``model`` with ``drafter`` and ``controller``; ``kv_blocks`` per worker."""

    def __init__(self, sc: Scenario, base_dir: Path) -> None:
        if sc.disaggregation is not None:
            raise TypeError("Deployment is one pool: build a fleet's pools with "
                            "cluster.build.deploy (a disaggregated scenario has two)")
        self.sc = sc
        self.notes: list[str] = []
        self.seed = int(sc.seed)
        hw_sec, spec = sc.hardware, sc.speculation
        # --- hardware, model, calibration
        self.hw = get_hardware(hw_sec.accelerator, "hardware.accelerator")
        self.model = get_model(sc.model, "model")
        self.tp = int(hw_sec.tensor_parallel)
        lin = self.model.attention.linear if self.model.attention is not None else None
        limits.check_tensor_parallel(
            self.tp, self.model.n_heads, self.model.n_kv_heads, self.model.name,
            linear_heads=((lin.num_key_heads, lin.num_value_heads)
                          if lin is not None and self.model.layers_of("linear") else None))
        self.n_workers = workers_of(hw_sec.count, self.tp, "hardware.count")
        limits.check_workers(self.n_workers, "hardware.count", devices=hw_sec.count,
                             prefix_cache=bool(sc.kv_cache.prefix_cache),
                             tiers=len(sc.kv_cache.tiers or ()))
        self.calibration = self._calibration(sc.calibration, base_dir)
        self.precision = get_precision(sc.quantization.model_dump(), "quantization")
        self.target = ForwardCostModel(self.model, self.hw, self.tp, self.precision,
                                       self.calibration)
        self._expert_parallel(hw_sec)
        if self.target.linear_dtype != self.precision.compute_dtype:
            self.notes.append(f"{self.hw.name} has no {self.precision.compute_dtype} peak: linear "
                              f"layers priced at its {self.target.linear_dtype} peak")
        # --- speculation
        self.method = spec.method
        engine_note = engine_config.note(spec)  # given as vLLM / SGLang flags
        if engine_note is not None:
            self.notes.append(engine_note)
        self.drafter, drafter_model = self._drafter(spec)
        if (spec.per_class or spec.switching) and self.method != "none":  # drafters
            # per class (speculation/per_class.py); with method none nothing drafts
            self.drafter, drafter_model = self._per_class(spec, self.drafter, drafter_model,
                                                          base_dir)
        self.controller = make_policy(spec.policy, self.method, spec.k, PolicyContext(
            spec.k, dict(spec.policy_params or {}),
            ridge_tokens=self.target.ridge_tokens()))
        if self.drafter.per_class and self.drafter.fallback is not None \
                and self.controller.fixed_k != 0:  # switching at run time (rules 4-6)
            self.controller = SwitchingPolicy(self.controller, spec.switching, self.drafter)
        self.overlap_draft = bool(spec.overlap_draft)
        acc_sec = spec.acceptance
        if self.method != "none" and acc_sec is None:
            raise ScenarioError("speculation.acceptance: required when speculation.method is "
                                f"{self.method!r} (a profile name, alpha, or tau at k)")
        self.acceptance = (build_acceptance(acc_sec, self.seed, speculation=spec,
                                            base_dir=base_dir, notes=self.notes)
                           if acc_sec is not None
                           else build_acceptance({"alpha": 0.0}, self.seed))
        if self.drafter.per_class:
            self.drafter.members[0].acceptance = self.acceptance
        # --- memory: weights of target (+ drafter) and KV per token, per device
        self.block_size = int(sc.scheduler.block_size)
        self.kv_blocks = self._kv_blocks(hw_sec.memory_fraction, drafter_model,
                                         sc.scheduler.kv_blocks)
        self.kv_cache = self._kv_cache(sc.kv_cache)
        # --- power and price
        cost = sc.cost
        self.price = cost.price_usd_per_hour if cost.price_usd_per_hour is not None \
            else self.hw.price_usd_per_hour
        self.power_idle = cost.power_idle_w if cost.power_idle_w is not None \
            else self.hw.power_idle_w
        self.power_max = cost.power_max_w if cost.power_max_w is not None \
            else self.hw.power_max_w
        if self.power_idle > self.power_max:
            key = "cost.power_idle_w" if cost.power_idle_w is not None else "cost.power_max_w"
            raise ScenarioError(f"{key}: expected idle power ({self.power_idle:g} W) at most the "
                                f"maximum power ({self.power_max:g} W)"
                                + ("" if cost.power_idle_w is not None and
                                   cost.power_max_w is not None
                                   else f" ({self.hw.name}'s catalog gives the other)"))
        self.peak_flops = self.target.linear_peak
        self.hbm_bw = self.hw.hbm_bw

    def _expert_parallel(self, hw: Any) -> None:
        """``hardware.expert_parallel`` / ``dp_attention`` / ``routing_skew`` /
        ``redundant_experts`` checked and handed to the target's cost model
        (``ForwardCostModel.expert_parallel``; ``routing_skew: sampled``, the busiest
        device's load by tokens per pass, from ``cost_models/routing.py``)."""
        m = self.model
        if not hw.expert_parallel:
            for key, off in (("dp_attention", False), ("routing_skew", None),
                             ("redundant_experts", None)):
                if getattr(hw, key) != off and not (key == "routing_skew"
                                                    and hw.routing_skew == 1.0):
                    raise ScenarioError(f"hardware.{key}: needs hardware.expert_parallel: true "
                                        f"(got {getattr(hw, key)!r} without it)")
            return
        if m.moe is None:
            raise ScenarioError(f"hardware.expert_parallel: {m.name} has no experts (a dense "
                                "model); remove it")
        if m.moe.n_experts % self.tp:
            raise ScenarioError(f"hardware.tensor_parallel: {m.name}'s {m.moe.n_experts} experts "
                                f"do not split evenly over {self.tp} expert-parallel devices")
        redundant = hw.redundant_experts
        if redundant is not None and redundant % self.tp:
            raise ScenarioError(f"hardware.redundant_experts: expected a multiple of the "
                                f"{self.tp} expert-parallel devices (the same number of expert "
                                f"slots on each), got {redundant}")
        if redundant is not None and redundant > m.moe.n_experts:
            raise ScenarioError(f"hardware.redundant_experts: expected at most {m.name}'s "
                                f"{m.moe.n_experts} experts (a replica of each), got {redundant}")
        given = SAMPLED if hw.routing_skew is None else hw.routing_skew  # sampled: the default
        if given == SAMPLED:
            skew = routing.skew_table(m.moe.n_experts, m.moe.top_k, self.tp, redundant)
        else:
            skew = float(given)
        self.target.expert_parallel(bool(hw.dp_attention), skew, redundant or 0)
        if self.tp > 1:
            slots = m.moe.n_experts + (redundant or 0)
            shown = (f"sampled ({min(skew):.2f}-{max(skew):.2f} by tokens per pass, "
                     f"the busiest device priced"
                     + ("; the default, hardware.routing_skew: 1 for balanced)"
                        if hw.routing_skew is None else ")") if given == SAMPLED
                     else f"{given:g} (the busiest device priced)")
            self.notes.append(
                f"expert parallel over {self.tp} devices ({slots // self.tp} experts each"
                + (f", EPLB: {redundant} redundant" if redundant is not None else "")
                + ")" + (", attention data-parallel, all-to-all per MoE layer"
                         if hw.dp_attention else "")
                + (f", routing skew {shown}" if given == SAMPLED or given != 1.0 else ""))

    @property
    def speculating(self) -> bool:
        """Whether the pool's workers draft at all (a method, and k above 0)."""
        return self.method != "none" and self.sc.speculation.k > 0

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
        if spec.method != "none" and spec.k == 0:  # k: 0 configures no speculator
            return NoDrafter(), None
        return built

    def _per_class(self, spec: Any, own: Drafter, own_model: DrafterModel | None,
                   base_dir: Path) -> tuple[Drafter, Any]:
        """The composite of the scenario's drafter and each class's own (per_class.py); its
        weights and KV per token are all the members' (every drafter is loaded)."""
        if getattr(spec, "tree", None) is not None:  # only a tree method has the key
            raise ScenarioError("speculation.tree: not with speculation.per_class or "
                                "switching (every class's drafter drafts a chain)")
        members = [Member("scenario", own, int(spec.k), None, spec.method)]
        models = [own_model] if own_model is not None else []
        of_class = {}
        entries = [(f"speculation.per_class.{name}", name, entry)
                   for name, entry in (spec.per_class or {}).items()]
        if spec.switching is not None:  # the fallback is one more member (rule 4)
            entries.append(("speculation.switching.fallback", None,
                            spec.switching.fallback))
        for where, name, entry in entries:
            try:
                drafter, model = self._drafter(entry)
                acc = entry.acceptance
                if entry.method != "none" and acc is None:
                    raise ScenarioError(f"acceptance: required when method is "
                                        f"{entry.method!r} (a profile name, alpha, or tau "
                                        "at k)")
                acceptance = (build_acceptance(acc, self.seed, speculation=entry,
                                               base_dir=base_dir, notes=self.notes)
                              if acc is not None else build_acceptance({"alpha": 0.0},
                                                                      self.seed))
            except (ScenarioError, CatalogError) as exc:
                msg = str(exc)
                msg = msg[len("speculation."):] if msg.startswith("speculation.") else msg
                raise ScenarioError(f"{where}.{msg}") from None
            k = int(entry.k) if entry.method != "none" else 0
            if name is not None:
                of_class[name] = len(members)
            members.append(Member(name or "fallback", drafter, k, acceptance, entry.method,
                                  where))
            if model is not None:
                models.append(model)
        composite = PerClassDrafter(members, of_class)
        if spec.switching is not None:
            composite.fallback = len(members) - 1
        self.notes.append("drafter per class: " + composite.describe())
        return composite, (combined_drafter_model(models) if models else None)

    def _kv_cache(self, kc: Any) -> pc.CacheConfig | None:
        """``kv_cache:`` in pages and bytes of one worker (None: blocks counted as before).
        A tier's capacity is bytes of one worker throughout (the scenario's GB, or the
        catalog's host memory per device x the worker's devices). Tier bandwidths are per
        device: a tensor-parallel group moves its shards at once."""
        if kc is None or not kc.enabled:
            return None
        ps = self.block_size
        if kc.page_size is not None and kc.page_size != ps:
            raise ScenarioError(f"kv_cache.page_size: expected scheduler.block_size ({ps}): a "
                                f"cache page is a KV block, got {kc.page_size}")
        page_bytes = max(int(round(self.kv_bytes_per_token_device * self.tp * ps)), 1)
        tiers, said = [], []
        hw = self.hw
        for i, t in enumerate(kc.tiers):
            bw, whence = t["bandwidth_gb_s"], []
            host = t["name"] == "host_dram"  # the only tier with catalog defaults
            if t["capacity_gb"] is not None:
                cap_bytes = t["capacity_gb"] * 1e9
            elif host and hw.host_memory_bytes is not None:
                cap_bytes = hw.host_memory_bytes * self.tp  # the worker's devices' share
                whence.append("capacity")
            else:
                raise ScenarioError(
                    f"kv_cache.tiers.{i}.capacity_gb: expected GB of this worker's KV "
                    f"the tier holds (only host_dram has a catalog default, and the "
                    f"{hw.name} catalog entry has "
                    + ("one" if hw.host_memory_bytes else "no host.memory_gb_per_device")
                    + ")")
            if bw is None:
                if host and hw.host_link_bw is not None:
                    bw = hw.host_link_bw / 1e9
                    whence.append("link")
                else:
                    bw = ASSUMED_TIER_GB_S
                    whence.append("assumed link")
            if cap_bytes < page_bytes:
                raise ScenarioError(f"kv_cache.tiers.{i}.capacity_gb: {cap_bytes / 1e9:g} GB "
                                    f"holds no {page_bytes:,}-byte page of {self.model.name}")
            src = [w for w in whence if w != "assumed link"]
            source = "; ".join(
                ([f"{' and '.join(src)} from the {hw.name} catalog entry: {hw.host_source}"]
                 if src else [])
                + (["assumed link default"] if "assumed link" in whence else [])) or "scenario"
            tiers.append(pc.TierSpec(t["name"], cap_bytes, bw * 1e9 * self.tp, t["latency_s"],
                                     source))
            said.append(f"{t['name']} {cap_bytes / 1e9:g} GB at {bw:g} GB/s per device + "
                        f"{t['latency_s'] * 1e6:g} us"
                        + (f" ({' and '.join(src)} from the {hw.name} catalog entry: "
                           f"{hw.host_source})" if src else "")
                        + (" (assumed link default)" if "assumed link" in whence else ""))
        names = [t.name for t in tiers]
        swap_tier = 1 + (names.index(kc.swap_tier) if kc.swap_tier is not None else 0)
        if tiers:
            self.notes.append("kv_cache tiers (per worker): " + "; ".join(said)
                              + "; promotions and swaps are charged to the iteration that "
                                "needs them, demotions are background write-backs (not "
                                "charged)")
        return pc.CacheConfig(bool(kc.prefix_cache), ps, page_bytes, kc.eviction, tiers,
                              kc.preemption == "swap", swap_tier, bool(kc.layerwise_loading))

    def _kinds_memory(self, drafter: Any) -> tuple[float, float]:
        """A model with layer kinds (docs/architecture.md, "Layer kinds"): KV bytes per
        token per device the block pool holds (the full-attention and MLA layers', the
        drafter's), and the bytes per device each running sequence holds besides: each
        sliding-window layer's KV of window + one block tokens (vLLM's hybrid allocator frees the blocks that slid out of the window,
        so a sequence holds at most that many) and the linear layers' state, 1 + k copies
        while speculating (vLLM's MambaManager keeps num_speculative_blocks extra state
        blocks per request for MTP/EAGLE; a verify of k + 1 tokens writes k + 1 states).
        ``self.kv_worker``: the per-sequence sizes of one worker (all its devices, target +
        drafter) that PD transfers move."""
        sizes = self.target.kv_sizes
        k = 0
        if self.speculating:
            ks = [int(self.sc.speculation.k)]
            if self.drafter.per_class:
                ks += [int(m.k) for m in self.drafter.members]
            k = max(ks)
        held = min(sizes.window + self.block_size, self.model.max_context) if sizes.window else 0
        per_seq = sizes.window_per_token * held + sizes.state_per_seq * (1 + k)
        per_token = sizes.full_per_token
        unique = self.model.kv_sizes(self.precision.kv_cache.bytes_per_element, 1)
        full_w, win_w, state_w = unique.full_per_token, unique.window_per_token, unique.state_per_seq
        if drafter is not None:
            d = drafter.cost
            ds = getattr(d, "kv_sizes", None)
            per_token += d.kv_bytes_per_token / self.tp
            full_w += d.kv_bytes_per_token
            if ds is not None and ds.state_per_seq:
                per_seq += ds.state_per_seq
                state_w += ds.state_per_seq * self.tp
        # a transfer moves each byte once: the unsharded sizes (MLA's latent and a copied
        # KV head once, not once per device)
        self.kv_worker = KVSizes(full_w, win_w, unique.window, state_w)
        return per_token, per_seq

    def _kv_blocks(self, fraction: float, drafter: Any, explicit: int | None = None) -> int:
        """KV blocks per worker: what ``fraction`` of memory holds after the weights, or the
        scenario's explicit count (``scheduler.kv_blocks`` / vLLM's
        ``num_gpu_blocks_override``), checked against the whole memory after the weights."""
        usable = self.hw.hbm_bytes * fraction
        weights = self.target.weight_bytes_per_device
        self.kv_worker: KVSizes | None = None  # set for a model with layer kinds
        kind_note = ""
        what = f"{self.model.name} ({self.precision.weights.name})"
        kinds = self.model.attention is not None
        if kinds:  # layer kinds: the block pool holds the KV that grows with context
            kv_per_token, per_seq = self._kinds_memory(drafter)
            reserve = int(self.sc.scheduler.max_batch) * per_seq
        else:
            kv_per_token, reserve = self.target.kv_bytes_per_token / self.tp, 0.0
        if drafter is not None:
            weights += drafter.cost.weight_bytes_per_device
            if not kinds:
                kv_per_token += drafter.cost.kv_bytes_per_token / self.tp
            what += f" + drafter {drafter.model.name}"
        self.kv_bytes_per_token_device = kv_per_token
        self.weight_bytes_device = weights
        self.state_blocks = 0  # blocks each running sequence holds besides its tokens' KV
        kc = self.sc.kv_cache  # (a prefix cache shares pages: its states stay set aside)
        if kinds and reserve > 0 and kv_per_token > 0 and (kc is None or not kc.enabled):
            # per running sequence, from the block pool (vLLM v1's hybrid KV cache manager:
            # a request takes its state and window blocks at admission, returns them at its
            # end), not set aside for scheduler.max_batch sequences
            self.state_blocks = max(math.ceil(per_seq / (kv_per_token * self.block_size)), 1)
            self.notes.append(
                f"each running sequence holds {self.state_blocks} KV blocks of "
                f"{self.block_size} tokens for its sliding-window KV and linear-attention state "
                f"({per_seq / 1e6:.1f} MB per device"
                + (", 1 + k state copies while speculating" if self.speculating else "")
                + "), taken from the block pool at admission and returned at its end, as "
                "vLLM v1's hybrid KV cache manager does")
            reserve = 0.0
        if kinds:
            weights += reserve  # the windows' and the linear layers' states, set aside
            if reserve > 0:
                kind_note = (f" + {reserve / 1e9:.1f} GB of sliding-window KV and "
                             "linear-attention state for scheduler.max_batch sequences")
            if kv_per_token <= 0:  # no KV grows with context: every sequence at full length
                return max(-(-int(self.sc.scheduler.max_batch) * self.model.max_context
                             // self.block_size), 2)
        if explicit is not None:
            # like vLLM's override, the count replaces the memory_fraction sizing; it must still
            # fit in the device's memory next to the weights
            key = ("engine.num_gpu_blocks_override" if self.sc.engine.num_gpu_blocks_override
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
                f"model: {what} needs {self.weight_bytes_device / 1e9:.1f} GB of weights"
                f"{kind_note} per device at "
                f"tensor_parallel={self.tp}, but {self.hw.name} has {self.hw.hbm_bytes / 1e9:.0f} "
                f"GB x memory_fraction {fraction:g} = {usable / 1e9:.1f} GB usable; raise "
                "tensor_parallel, quantize, "
                + ("lower scheduler.max_batch or speculation.k, " if kind_note else "")
                + "or pick a larger accelerator")
        blocks = int((usable - weights) // (kv_per_token * self.block_size))
        if blocks < 2:
            raise CatalogError(f"model: {what} leaves no room for the KV cache on {self.hw.name} "
                               f"(weights {weights / 1e9:.1f} GB of {usable / 1e9:.1f} GB usable)")
        return blocks
