"""A run's metrics as a typed object: what the report, the CLI, sweeps and plans read.

The simulation writes ``metrics.json`` from the summary dict (``metrics/summary.py``),
unchanged and byte for byte; readers build ``RunMetrics`` from that dict (or from a
metrics.json read back) at their boundary and read attributes, so a misspelt metric is an
AttributeError where it is written, not a silent ``None`` from ``.get``. Every field may be
absent (None or empty) because a metrics.json written by an older specsim, or a run that
stopped early, lacks some; the open-ended parts (per-class maps, the KV cache and PD
blocks, the policy's decisions) keep what they hold as extra fields or mappings.

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


class Fleet(_Block):
    """``fleet``: the devices, their price and power, the run's cost and energy."""

    accelerator: str | None = None
    devices: int | None = None
    workers: int | None = None
    tensor_parallel: int | str | None = None  # "1/2" for pools that differ
    price_usd_per_device_hour: float | None = None
    price_date: str | None = None
    power_idle_w: float | None = None
    power_max_w: float | None = None
    cost_usd: float | None = None
    energy_j: float | None = None
    average_power_w: float | None = None


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


class RunMetrics(_Block):
    """metrics.json of one run (see the README's metrics.json section for each key)."""

    scenario: str | None = None
    seed: int | None = None
    overload: dict[str, Any] | None = None  # present when the overload watch stopped the run
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
    model: str | None = None
    speculation: Speculation = Field(default_factory=Speculation)
    simulated_time_s: float | None = None
    wall_time_s: float | None = None
    calibration: str | None = None
    calibration_values: dict[str, Any] = Field(default_factory=dict)
    hardware_calibrated: bool | None = None
    notes: list[str] = Field(default_factory=list)
    kv_cache: dict[str, Any] | None = None  # with kv_cache: on (kv/prefix_cache.summary)
    disaggregation: dict[str, Any] | None = None  # a PD fleet: pools and the KV link
    baseline: dict[str, Any] | None = None  # a --baseline run: the run without speculation

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
