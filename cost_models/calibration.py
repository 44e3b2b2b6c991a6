"""Calibration profiles: the efficiencies and overheads the roofline is scaled by.

A profile is fitted to measurements (``specsim calibrate``) and stored as YAML. Without
one, the roofline uses the *uncalibrated default* below and every report says so.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from specsim import values

from .catalog_schema import MAX_NUMBER
from .errors import CatalogError

UNCALIBRATED = "uncalibrated default"
UNCALIBRATED_REF = "uncalibrated"  # ``calibration: uncalibrated`` in a scenario

# Measured dense-matmul ceilings as a share of the datasheet BF16 peak
# (stas00/ml-engineering, compute/accelerator/README.md, via shared/REFERENCES.md).
_MEASURED_MATMUL_ETA = {"A100-SXM-80GB": 0.87, "H100-SXM": 0.80, "H200-SXM": 0.80,
                        "B200": 0.78, "MI300X": 0.51}


# The per-op structure's parameters beyond the original four, with the neutral value each
# takes when a profile does not fit it (the original roofline). SI units; efficiencies are
# shares of the datasheet peak or bandwidth.
EXTRA_PARAMS: dict[str, float | None] = {
    "matmul_half_tokens": 0.0,  # tokens per pass at which matmul efficiency is half its max
    "eta_elementwise": None,  # norms, residual adds, rope, activation (None: eta_memory)
    "eta_attn_prefill": None,  # attention FLOPs vs the bf16 peak (None: eta_compute)
    "eta_attn_decode": None,  # attention KV reads vs bandwidth (None: eta_memory)
    "allreduce_latency_s": None,  # per all-reduce (None: the catalog link latency)
    "allreduce_bw_eff": 1.0,  # achieved all-reduce bus bandwidth vs the catalog link
    "allreduce_nic_latency_s": None,  # per all-reduce of a TP group wider than a node
    #                                   (None: allreduce_latency_s)
    "allreduce_nic_bw_eff": None,  # achieved share of each device's NIC (scale_out) in such
    #                                an all-reduce (None: allreduce_bw_eff)
    "engine_fixed_s": 0.0,  # CPU work per iteration: scheduler, input preparation
    "engine_per_seq_s": 0.0,  # ... per sequence in the batch (sampling, bookkeeping)
    "engine_per_prefill_s": 0.0,  # ... per prompt chunk in the batch
    "draft_pass_overhead_s": None,  # fixed cost of one drafter pass (None: fixed_overhead_s)
    "draft_layer_overhead_s": None,  # kernel floor per drafter layer (None: per_layer_overhead_s)
    "spec_step_overhead_s": 0.0,  # per step with a drafter configured: proposer launch,
    "spec_seq_overhead_s": 0.0,  # ... per decoding sequence: rejection sampling, bookkeeping
    "spec_token_overhead_s": 0.0,  # ... per drafted token: draft-token bookkeeping, KV slots
}


@dataclass(frozen=True)
class Calibration:
    """Roofline scaling: efficiencies per op group, kernel floors and overheads per pass,
    all-reduce latency/bandwidth, and the engine's and speculation's CPU work per step."""

    name: str
    eta_compute: float
    eta_memory: float
    per_layer_overhead_s: float
    fixed_overhead_s: float
    calibrated: bool
    source: str
    hardware: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    matmul_half_tokens: float = 0.0
    eta_elementwise: float | None = None
    eta_attn_prefill: float | None = None
    eta_attn_decode: float | None = None
    allreduce_latency_s: float | None = None
    allreduce_bw_eff: float = 1.0
    allreduce_nic_latency_s: float | None = None
    allreduce_nic_bw_eff: float | None = None
    engine_fixed_s: float = 0.0
    engine_per_seq_s: float = 0.0
    engine_per_prefill_s: float = 0.0
    draft_pass_overhead_s: float | None = None
    draft_layer_overhead_s: float | None = None
    spec_step_overhead_s: float = 0.0
    spec_seq_overhead_s: float = 0.0
    spec_token_overhead_s: float = 0.0

    def values(self) -> dict[str, float | None]:
        """Every fitted parameter by name (for metrics.json and reports)."""
        keys = ("eta_compute", "eta_memory", "per_layer_overhead_s", "fixed_overhead_s",
                *EXTRA_PARAMS)
        return {k: getattr(self, k) for k in keys}


def uncalibrated_default(hardware_name: str) -> Calibration:
    """Defaults for a chip no profile has been fitted to (labelled as such in reports).

    eta_compute: the measured matmul ceiling where REFERENCES.md has one, else 0.70 (assumed).
    eta_memory 0.80, 5 us per layer and 200 us per pass: assumed, not measured. The
    engine's CPU work per iteration and speculation's own overheads are the serving
    engine's, not the chip's: they come from the bundled H100-SXM profile's vLLM fit
    (transferred and said so), so that an uncalibrated chip is not spared costs a
    calibrated one pays.
    """
    eta_c = _MEASURED_MATMUL_ETA.get(hardware_name, 0.70)
    src = ("eta_compute: measured matmul ceiling (ml-engineering via REFERENCES.md)"
           if hardware_name in _MEASURED_MATMUL_ETA else "eta_compute 0.70: assumed")
    engine, engine_src = _engine_defaults()
    return Calibration(
        name=UNCALIBRATED, eta_compute=eta_c, eta_memory=0.80,
        per_layer_overhead_s=5e-6, fixed_overhead_s=200e-6, calibrated=False,
        source=src + "; eta_memory 0.80, 5 us/layer, 200 us/pass: assumed" + engine_src,
        **engine,
    )


#: engine and speculation parameters an uncalibrated chip borrows (see uncalibrated_default)
ENGINE_DEFAULT_PARAMS = ("engine_fixed_s", "engine_per_seq_s", "engine_per_prefill_s",
                         "spec_step_overhead_s", "spec_seq_overhead_s", "spec_token_overhead_s",
                         "draft_pass_overhead_s", "draft_layer_overhead_s")
ENGINE_DEFAULT_FROM = "H100-SXM"


@functools.cache
def _engine_defaults() -> tuple[dict[str, float], str]:
    """The bundled H100-SXM profile's engine-stack values, or nothing without it."""
    from specsim.yamlio import load as load_yaml  # lazy: no cycle

    try:
        text = _bundled_dir().joinpath(f"{ENGINE_DEFAULT_FROM}.yaml").read_text()
        doc = load_yaml(text)
        fitted = doc.get("fitted") if isinstance(doc, dict) else None
    except (OSError, yaml.YAMLError):
        return {}, ""
    if not isinstance(fitted, dict):
        return {}, ""
    vals = {k: float(fitted[k]) for k in ENGINE_DEFAULT_PARAMS
            if isinstance(fitted.get(k), int | float)}
    if not vals:
        return {}, ""
    return vals, (f"; engine CPU work, speculation overheads and drafter-pass floors: "
                  f"transferred from the bundled "
                  f"{ENGINE_DEFAULT_FROM} profile (a vLLM v1 fit)")


def _bundled_dir() -> Any:
    return resources.files(__package__).joinpath("calibrations")


def list_profiles() -> list[str]:
    return sorted(p.name[:-5] for p in _bundled_dir().iterdir() if p.name.endswith(".yaml"))


def default_profile(hardware_name: str) -> Calibration | None:
    """The bundled profile fitted to ``hardware_name`` (a file named after it), if any."""
    if hardware_name in list_profiles():
        cal = load_profile(hardware_name)
        if cal.hardware == hardware_name:
            return cal
    return None


def load_profile(ref: str, base_dir: Path | None = None, where: str = "calibration") -> Calibration:
    """A bundled profile by name, or a YAML file path (relative to ``base_dir``)."""
    if not isinstance(ref, str):
        raise CatalogError(f"{where}: expected a profile name or a file path, got {ref!r}")
    bundled = _bundled_dir().joinpath(f"{ref}.yaml")
    path = Path(ref)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    if bundled.is_file():
        text, origin = bundled.read_text(), f"bundled profile {ref}"
    elif path.is_file():
        origin = str(path)
        from specsim import safe_read  # lazy: no cycle

        try:  # under the size cap
            text = safe_read.read_text(path, "a YAML calibration profile")
        except safe_read.InputError as exc:
            raise CatalogError(f"{where}: {exc}") from None
    else:
        raise CatalogError(f"{where}: no calibration profile {ref!r} (bundled: "
                           f"{', '.join(list_profiles()) or 'none'}; or give a YAML file path)")
    try:
        from specsim.yamlio import load as load_yaml  # YAML 1.2 numbers; lazy: no cycle
        from specsim.yamlio import load_bundled

        data = load_bundled(text) if origin.startswith("bundled") else load_yaml(text, origin)
    except yaml.YAMLError as exc:
        raise CatalogError(f"{origin}: not valid YAML ({str(exc).splitlines()[0]})") from None
    return profile_from_dict(data, origin, default_name=ref)


# Efficiencies are fractions of a peak (a little over 1 allowed for a conservative catalog
# peak); every other fitted value is a non-negative time or size, at most the catalogs'
# sanity bound (beyond it the cost model's floats overflow).
_EFFICIENCIES = ("eta_compute", "eta_memory", "eta_elementwise", "eta_attn_prefill",
                 "eta_attn_decode", "allreduce_bw_eff", "allreduce_nic_bw_eff")


def _fitted(fitted: dict[str, Any], key: str, origin: str) -> float | None:
    """``fitted[key]`` by the shared number rule; the extra parameters default (None allowed)."""
    extra = key in EXTRA_PARAMS
    value = fitted.get(key, EXTRA_PARAMS[key]) if extra else fitted.get(key)
    eff = key in _EFFICIENCIES
    try:
        return values.number(value, lo=0, exclusive_lo=eff, hi=1.5 if eff else MAX_NUMBER,
                             nullable=extra)
    except values.ValueRuleError as exc:
        raise CatalogError(f"{origin}: fitted.{key}: {exc}") from None


def profile_from_dict(data: Any, origin: str, default_name: str = "profile") -> Calibration:
    if not isinstance(data, dict) or not isinstance(data.get("fitted"), dict):
        raise CatalogError(f"{origin}: expected a mapping with a 'fitted' section")
    fitted = data["fitted"]
    known = ("eta_compute", "eta_memory", "per_layer_overhead_s", "fixed_overhead_s",
             *EXTRA_PARAMS)
    try:
        values.known_keys(fitted, known)
    except values.ValueRuleError as exc:
        raise CatalogError(f"{origin}: fitted.{exc}") from None
    vals = {key: _fitted(fitted, key, origin) for key in known}
    details = {k: v for k, v in data.items() if k != "fitted"}
    return Calibration(
        name=str(data.get("name", default_name)),
        calibrated=True,
        source=str(data.get("source", origin)),
        hardware=data.get("hardware") if isinstance(data.get("hardware"), str) else None,
        details=details,
        **vals,
    )
