"""A run's metrics as a typed object: what the report, the CLI, sweeps and plans read.

The simulation writes ``metrics.json`` from the summary dict (``metrics/summary.py``),
unchanged and byte for byte; readers build ``RunMetrics`` from that dict (or from a
metrics.json read back) at their boundary and read attributes, so a misspelt metric is an
AttributeError where it is written, not a silent ``None`` from ``.get``. Every field may be
absent (None or empty) because a metrics.json written by an older specsim, or a run that
stopped early, lacks some. The KV cache, PD, baseline and overload blocks are typed too
(every key a run writes declared; tests/test_run_metrics.py fails on an undeclared one);
what is keyed by a name the run chooses (tiers, pools, classes, tier pairs, the policy's
decisions) is a mapping of those names to typed blocks or numbers.

Adding a run metric: a line in ``summary.py`` that computes it and a field here.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specsim.errors import ScenarioError


class _Block(BaseModel):
    """A metrics.json block: known keys typed, any other kept (a newer or older specsim)."""

    model_config = ConfigDict(extra="allow", frozen=True)


class Dist(_Block):
    """A latency distribution (``collector.dist``): NaN where there were no values."""

    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None


class Slo(_Block):
    ttft_s: float | None = None
    tpot_s: float | None = None
    tiers: dict[str, dict[str, float | None]] | None = None  # slo.tiers, when set


class TierSlo(_Block):
    """One ``slo_by_tier`` entry (``summary.slo_by_tier``): a tier's targets, requests and
    how many met them (``attainment``: met every target, of arrived)."""

    ttft_target_s: float | None = None
    tpot_target_s: float | None = None
    requests: int | None = None
    completed: int | None = None
    rejected: int | None = None
    ttft_s: Dist = Field(default_factory=Dist)
    tpot_s: Dist = Field(default_factory=Dist)
    ttft_met: int | None = None
    tpot_met: int | None = None
    slo_met: int | None = None
    attainment: float | None = None
    attainment_of_completed: float | None = None
    goodput_requests_per_s: float | None = None


class _Devices(_Block):
    """Devices, their price and power, their cost and energy over the run: a pool's
    (``summary.pool_metrics``) and the fleet's, the pools added (``summary.fleet_block``)."""

    accelerator: str | None = None
    devices: int | None = None
    workers: int | None = None
    price_usd_per_device_hour: float | None = None
    price_date: str | None = None
    power_idle_w: float | None = None
    power_max_w: float | None = None
    cost_usd: float | None = None
    energy_j: float | None = None


class Fleet(_Devices):
    """``fleet``: the devices, their price and power, the run's cost and energy."""

    tensor_parallel: int | str | None = None  # "1/2" for pools that differ
    average_power_w: float | None = None


class PhaseEnergy(_Block):
    """One ``energy.phases`` entry (``summary.energy_by_phase``): a phase's device-seconds,
    joules, average watts per device, share of the fleet's energy and mean utilisations."""

    device_seconds: float | None = None
    energy_j: float | None = None
    average_power_w: float | None = None
    energy_fraction: float | None = None
    compute_util: float | None = None
    memory_util: float | None = None


class PowerModel(_Block):
    """``energy.power_model``: the power rule and, per accelerator, its curve and source."""

    rule: str | None = None
    accelerators: dict[str, dict[str, Any]] = Field(default_factory=dict)


class Energy(_Block):
    """``energy``: where the fleet's energy went by phase (draft, verify, prefill, host,
    idle; they add up to ``fleet.energy_j``) and the power model that priced it."""

    phases: dict[str, PhaseEnergy] = Field(default_factory=dict)
    power_model: PowerModel = Field(default_factory=PowerModel)


class SpeculativeKv(_Block):
    allocated: int | None = None
    freed_rejected: int | None = None
    committed: int | None = None
    per_worker: dict[str, list[int]] = Field(default_factory=dict)


class Speculation(_Block):
    """``speculation``: the method and policy, where the busy time went, the accepted-length
    histogram per class and the policy's decisions."""

    method: str | None = None
    k: int | None = None
    policy: str | None = None
    drafter: str | None = None
    acceptance_profile: str | None = None
    work_s: dict[str, float] = Field(default_factory=dict)
    work_j: dict[str, float] = Field(default_factory=dict)
    wasted_time_fraction: float | None = None
    wasted_energy_fraction: float | None = None
    accepted_per_step_histogram: dict[str, list[int]] = Field(default_factory=dict)
    policy_decisions: dict[str, int] = Field(default_factory=dict)
    policy_changes: int | None = None
    drafter_switch_count: int | None = None
    drafter_switches: list[dict[str, Any]] = Field(default_factory=list)


class Overload(_Block):
    """``overload`` (present when the overload watch stopped the run; cluster/overload.py):
    when, the queue then and the rates that made it grow."""

    detected: bool | None = None
    at_s: float | None = None
    queued_requests: int | None = None
    oldest_wait_s: float | None = None
    arrival_rate_per_s: float | None = None
    completion_rate_per_s: float | None = None
    rule: str | None = None


class Tier(_Block):
    """``kv_cache.tiers.<name>``: one tier's capacity and use (a lower tier: its link too)."""

    capacity_blocks_per_worker: int | None = None
    capacity_gb_per_worker: float | None = None  # lower tiers: as resolved, and its source
    bandwidth_gb_s_per_worker: float | None = None
    latency_s: float | None = None
    source: str | None = None
    used_blocks_at_end: int | None = None
    cached_blocks_at_end: int | None = None


class PreemptionsByKind(_Block):
    recompute: int | None = None
    swap: int | None = None


class MeanMax(_Block):
    mean: float | None = None
    max: float | None = None


class KvCache(_Block):
    """``kv_cache`` (a run with ``kv_cache:``; kv/prefix_cache.summary): hits per tier, bytes
    moved per tier pair, evictions, preemptions by kind, the transfer time inside TTFT."""

    prefix_cache: bool | None = None
    eviction: str | None = None
    preemption: str | None = None
    layerwise_loading: bool | None = None
    page_tokens: int | None = None
    page_bytes: int | None = None
    tiers: dict[str, Tier] = Field(default_factory=dict)
    lookups: int | None = None
    lookup_tokens: int | None = None
    hit_tokens: dict[str, int] = Field(default_factory=dict)
    hit_blocks: dict[str, int] = Field(default_factory=dict)
    hit_rate: dict[str, float] = Field(default_factory=dict)  # per tier and "total"
    prefill_tokens_saved: int | None = None
    bytes_moved: dict[str, int] = Field(default_factory=dict)  # "hbm->host_dram": bytes
    blocks_moved: dict[str, int] = Field(default_factory=dict)
    evicted_blocks: dict[str, int] = Field(default_factory=dict)
    evicted_for_growth_blocks: int | None = None
    preemptions_by_kind: PreemptionsByKind = Field(default_factory=PreemptionsByKind)
    swap_fallbacks: int | None = None
    swaps_dropped: int | None = None
    transfer_s: float | None = None
    ttft_transfer_s: MeanMax = Field(default_factory=MeanMax)
    ttft_transfer_fraction: float | None = None


class Pool(_Devices):
    """``disaggregation.pools.<name>``: one pool's devices, cost, energy and load
    (metrics/summary.pool_metrics)."""

    tensor_parallel: int | None = None
    worker_ids: list[int] = Field(default_factory=list)  # the first and the last
    busy_fraction: float | None = None
    kv_blocks_per_worker: int | None = None
    kv_peak_utilization: float | None = None
    iterations: int | None = None
    preemptions: int | None = None
    calibration: str | None = None


class Link(_Block):
    bandwidth_gb_s: float | None = None
    latency_s: float | None = None
    shared: bool | None = None
    links: int | None = None
    busy_fraction: float | None = None


class Disaggregation(_Block):
    """``disaggregation`` (a PD fleet; cluster/pd.KvHandoff.metrics): the pools, the KV
    link, the transfers and their share of TTFT."""

    pools: dict[str, Pool] = Field(default_factory=dict)
    link: Link = Field(default_factory=Link)
    decode_router: str | None = None
    transfers: int | None = None
    transfers_in_flight_at_end: int | None = None
    bytes_moved: float | None = None
    kv_bytes_per_token: float | None = None
    transfer_s: Dist = Field(default_factory=Dist)
    link_wait_s: Dist = Field(default_factory=Dist)
    prefill_ttft_s: Dist = Field(default_factory=Dist)
    transfer_share_of_ttft: float | None = None
    completed_on_prefill_pool: int | None = None
    prefilled_on_decode_pool: int | None = None


class Means(_Block):
    """One side of a class's comparison: completed requests and their mean latencies."""

    requests: int | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    ttft_s: float | None = None


class ClassComparison(_Block):
    speculative: Means = Field(default_factory=Means)
    baseline: Means = Field(default_factory=Means)
    tpot_speedup: float | None = None  # baseline / speculative
    e2e_speedup: float | None = None
    ttft_speedup: float | None = None


class Pair(_Block):
    """A run-level figure with speculation and without (``ratio``: where one is given,
    above 1 means speculation helped)."""

    speculative: float | None = None
    baseline: float | None = None
    ratio: float | None = None


class BaselineRun(_Block):
    throughput_output_tokens_per_s: Pair = Field(default_factory=Pair)
    energy_j_per_output_token: Pair = Field(default_factory=Pair)
    cost_usd_per_million_output_tokens: Pair = Field(default_factory=Pair)
    busy_fraction: Pair = Field(default_factory=Pair)
    simulated_time_s: Pair = Field(default_factory=Pair)
    output_tokens: Pair = Field(default_factory=Pair)
    average_power_w: Pair = Field(default_factory=Pair)


class BaselineFleet(_Block):
    devices: int | None = None
    price_usd_per_device_hour: float | None = None
    price_date: str | None = None


class PhasePair(_Block):
    """``baseline.energy_phases.<phase>``: watts per device and joules per output token
    of one energy phase, with speculation and without (metrics/baseline._phases)."""

    speculative_w: float | None = None
    baseline_w: float | None = None
    speculative_j_per_token: float | None = None
    baseline_j_per_token: float | None = None


class Baseline(_Block):
    """``baseline`` (``specsim run --baseline``; metrics/baseline.compare): per class and
    for the run, the figures with speculation and without."""

    scenario_change: str | None = None
    per_class: dict[str, ClassComparison] = Field(default_factory=dict)  # "all" first
    run: BaselineRun = Field(default_factory=BaselineRun)
    fleet: BaselineFleet = Field(default_factory=BaselineFleet)
    energy_phases: dict[str, PhasePair] = Field(default_factory=dict)
    note: str | None = None


class RunMetrics(_Block):
    """metrics.json of one run (see the README's metrics.json section for each key)."""

    scenario: str | None = None
    seed: int | None = None
    overload: Overload | None = None  # present when the overload watch stopped the run
    requests_arrived: int | None = None
    requests_completed: int | None = None
    requests_rejected: int | None = None
    requests_in_flight: int | None = None
    rejected_by_reason: dict[str, int] = Field(default_factory=dict)
    requests_truncated_to_context: int | None = None
    requests_dropped_for_context: int | None = None
    output_tokens: int | None = None
    accepted_tokens: int | None = None
    bonus_tokens: int | None = None
    drafted_tokens: int | None = None
    ttft_s: Dist = Field(default_factory=Dist)
    tpot_s: Dist = Field(default_factory=Dist)
    itl_s: dict[str, Any] = Field(default_factory=dict)
    e2e_s: Dist = Field(default_factory=Dist)
    throughput_output_tokens_per_s: float | None = None
    goodput_requests_per_s: float | None = None
    slo: Slo = Field(default_factory=Slo)
    slo_by_tier: dict[str, TierSlo] = Field(default_factory=dict)  # two tiers or slo.tiers
    mean_acceptance_length: float | None = None
    acceptance_rate: float | None = None
    draft_time_fraction: float | None = None
    verify_time_fraction: float | None = None
    busy_fraction: float | None = None
    kv_peak_utilization: float | None = None
    kv_blocks_per_worker: int | None = None
    kv_blocks_used_at_end: int | None = None
    preemptions: int | None = None
    speculative_kv_blocks: SpeculativeKv | None = None
    iterations: int | None = None
    cost_usd_per_million_output_tokens: float | None = None
    energy_j_per_output_token: float | None = None
    fleet: Fleet = Field(default_factory=Fleet)
    energy: Energy = Field(default_factory=Energy)
    model: str | None = None
    speculation: Speculation = Field(default_factory=Speculation)
    simulated_time_s: float | None = None
    wall_time_s: float | None = None
    calibration: str | None = None
    calibration_values: dict[str, Any] = Field(default_factory=dict)
    hardware_calibrated: bool | None = None
    notes: list[str] = Field(default_factory=list)
    kv_cache: KvCache | None = None  # with kv_cache: on (kv/prefix_cache.summary)
    disaggregation: Disaggregation | None = None  # a PD fleet: pools and the KV link
    baseline: Baseline | None = None  # a --baseline run: the run without speculation

    @classmethod
    def from_summary(cls, metrics: Any, origin: str = "metrics") -> RunMetrics:
        """The typed metrics of a summary dict or a metrics.json read back; a value of the
        wrong type is a one-line error naming ``origin`` and the key."""
        if isinstance(metrics, RunMetrics):
            return metrics
        try:
            return cls.model_validate(metrics or {})
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            key = ".".join(str(p) for p in err["loc"]) or "metrics"
            raise ScenarioError(f"{origin}: {key}: {err['msg'].lower()}") from None
