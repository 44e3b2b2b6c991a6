"""Hardware, model and quantization catalogs.

The catalogs are YAML files shipped inside the package (``cost_models/data``), each entry
with a ``source:``. A scenario names an entry, or defines one inline with the same fields;
both go through the same validation so an inline entry cannot smuggle in a typo.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

from .errors import CatalogError

DTYPES = ("bf16", "fp8", "int8", "fp4")
MAX_NUMBER = 1e15  # a sanity bound on every catalog number (inline entries included)
MIN_POSITIVE = 1e-6  # and on the smallest positive one (TFLOP/s, GB, GB/s, W)


def _load_yaml(name: str) -> dict[str, Any]:
    text = resources.files(__package__).joinpath("data", name).read_text()
    return yaml.safe_load(text) or {}


@functools.cache
def hardware_catalog() -> dict[str, Any]:
    return _load_yaml("hardware.yaml")


@functools.cache
def model_catalog() -> dict[str, Any]:
    return _load_yaml("models.yaml")


@functools.cache
def quant_catalog() -> dict[str, Any]:
    return _load_yaml("quantization.yaml")


# ---------------------------------------------------------------- field checking


def _check_keys(where: str, entry: Any, required: set[str], optional: set[str]) -> dict:
    if not isinstance(entry, dict):
        raise CatalogError(f"{where}: expected a mapping, got {type(entry).__name__}")
    unknown = sorted(set(entry) - required - optional, key=str)
    if unknown:
        allowed = ", ".join(sorted(required | optional))
        raise CatalogError(f"{where}.{unknown[0]}: unknown key (expected one of: {allowed})")
    missing = sorted(required - set(entry))
    if missing:
        raise CatalogError(f"{where}.{missing[0]}: required key is missing")
    return entry


def _num(where: str, value: Any, *, positive: bool = False, allow_none: bool = False,
         integer: bool = False) -> Any:
    if value is None and allow_none:
        return None
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if integer:
        ok = isinstance(value, int) and not isinstance(value, bool)
    if not ok:
        kind = "an integer" if integer else "a number"
        raise CatalogError(f"{where}: expected {kind}, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise CatalogError(f"{where}: expected a finite number, got {value}")
    if value > MAX_NUMBER:  # sizes and rates beyond this overflow the cost model's floats
        raise CatalogError(f"{where}: expected a number at most {MAX_NUMBER:g}, got {value!r}")
    if positive and 0 < value < MIN_POSITIVE:  # e.g. 1e-300 GB/s: times overflow to inf
        raise CatalogError(f"{where}: expected a number at least {MIN_POSITIVE:g}, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise CatalogError(f"{where}: expected a {'positive' if positive else 'non-negative'} "
                           f"number, got {value!r}")
    return value


def _str(where: str, value: Any) -> str:
    if not isinstance(value, str):
        raise CatalogError(f"{where}: expected a string, got {value!r}")
    return value


# ---------------------------------------------------------------- hardware


@dataclass(frozen=True)
class HardwareSpec:
    """One accelerator: peaks, memory, link, power and price (per device)."""

    name: str
    kind: str
    vendor: str
    peak_flops: dict[str, float | None]  # FLOP/s per dtype (dense)
    hbm_bytes: float
    hbm_bw: float  # bytes/s
    link_bw: float  # bytes/s per direction per device
    link_latency_s: float
    power_idle_w: float
    power_max_w: float
    price_usd_per_hour: float
    price_date: str
    source: str
    notes: str = ""

    def peak(self, dtype: str) -> tuple[float, str]:
        """Peak FLOP/s for ``dtype``, falling back to the next wider supported dtype.

        A chip without FP8 tensor cores (A100) runs FP8 weights upcast to BF16, as
        weight-only kernels do; the dtype actually used is returned with the peak.
        """
        chains = {"fp4": ["fp4", "fp8", "bf16"], "fp8": ["fp8", "bf16"], "int8": ["int8", "bf16"]}
        order = chains.get(dtype, ["bf16"])
        start = 0
        for d in order[start:]:
            value = self.peak_flops.get(d)
            if value:
                return float(value), d
        raise CatalogError(f"hardware {self.name}: no peak_tflops for {dtype} or any wider dtype")


_HW_REQUIRED = {"kind", "peak_tflops", "hbm_gb", "hbm_bw_gb_s", "interconnect", "power_w",
                "price_usd_per_hour", "source"}
_HW_OPTIONAL = {"vendor", "price_date", "notes"}


def hardware_from_dict(name: str, entry: Any, where: str) -> HardwareSpec:
    e = _check_keys(where, entry, _HW_REQUIRED, _HW_OPTIONAL)
    kind = _str(f"{where}.kind", e["kind"])
    if kind not in ("gpu", "tpu", "ppu", "cpu"):
        raise CatalogError(f"{where}.kind: expected one of gpu, tpu, ppu, cpu, got {kind!r}")
    peaks = _check_keys(f"{where}.peak_tflops", e["peak_tflops"], {"bf16"}, set(DTYPES) | {"fp16"})
    peak_flops = {d: (None if v is None else _num(f"{where}.peak_tflops.{d}", v, positive=True) * 1e12)
                  for d, v in peaks.items()}
    link = _check_keys(f"{where}.interconnect", e["interconnect"], {"bw_gb_s", "latency_us"},
                       {"name"})
    power = _check_keys(f"{where}.power_w", e["power_w"], {"idle", "max"}, set())
    idle = _num(f"{where}.power_w.idle", power["idle"])
    pmax = _num(f"{where}.power_w.max", power["max"], positive=True)
    if idle > pmax:
        raise CatalogError(f"{where}.power_w.idle: expected at most power_w.max ({pmax}), got {idle}")
    return HardwareSpec(
        name=name,
        kind=kind,
        vendor=str(e.get("vendor", "")),
        peak_flops=peak_flops,
        hbm_bytes=_num(f"{where}.hbm_gb", e["hbm_gb"], positive=True) * 1e9,
        hbm_bw=_num(f"{where}.hbm_bw_gb_s", e["hbm_bw_gb_s"], positive=True) * 1e9,
        link_bw=_num(f"{where}.interconnect.bw_gb_s", link["bw_gb_s"], positive=True) * 1e9,
        link_latency_s=_num(f"{where}.interconnect.latency_us", link["latency_us"]) * 1e-6,
        power_idle_w=float(idle),
        power_max_w=float(pmax),
        price_usd_per_hour=float(_num(f"{where}.price_usd_per_hour", e["price_usd_per_hour"])),
        price_date=str(e.get("price_date", "")),
        source=_str(f"{where}.source", e["source"]),
        notes=str(e.get("notes", "") or ""),
    )


def get_hardware(ref: Any, where: str = "hardware.accelerator") -> HardwareSpec:
    """A catalog name, or an inline mapping with the catalog's fields (plus ``name``)."""
    if isinstance(ref, str):
        cat = hardware_catalog()
        if ref not in cat:
            raise CatalogError(f"{where}: unknown accelerator {ref!r} (catalog has: "
                               f"{', '.join(sorted(cat))})")
        return hardware_from_dict(ref, cat[ref], f"hardware catalog entry {ref}")
    if isinstance(ref, dict):
        entry = dict(ref)
        name = str(entry.pop("name", "inline-accelerator"))
        return hardware_from_dict(name, entry, where)
    raise CatalogError(f"{where}: expected a catalog name or a mapping, got {ref!r}")


# ---------------------------------------------------------------- models


@dataclass(frozen=True)
class MoESpec:
    n_experts: int
    top_k: int
    expert_intermediate_size: int
    n_shared_experts: int = 0
    shared_expert_intermediate_size: int = 0
    first_dense_layers: int = 0


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer's shape: everything the roofline needs."""

    name: str
    n_layers: int
    hidden_size: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tied_embeddings: bool
    max_context: int
    params_b: float
    moe: MoESpec | None
    mtp_layers: int
    native_weight_format: str
    tokenizer: str
    source: str
    notes: str = ""

    # --- parameter counts (elements), computed from the shape, not the published total
    @property
    def attn_params_per_layer(self) -> int:
        q_o = 2 * self.hidden_size * self.n_heads * self.head_dim
        k_v = 2 * self.hidden_size * self.n_kv_heads * self.head_dim
        return q_o + k_v

    @property
    def n_moe_layers(self) -> int:
        return 0 if self.moe is None else self.n_layers - self.moe.first_dense_layers

    @property
    def n_dense_layers(self) -> int:
        return self.n_layers - self.n_moe_layers

    @property
    def expert_params(self) -> int:
        """Elements of one routed expert (SwiGLU: gate, up, down)."""
        return 0 if self.moe is None else 3 * self.hidden_size * self.moe.expert_intermediate_size

    @property
    def moe_always_params_per_layer(self) -> int:
        """Per MoE layer, weights every token touches: router and shared experts."""
        if self.moe is None:
            return 0
        shared = 3 * self.hidden_size * self.moe.shared_expert_intermediate_size * max(
            self.moe.n_shared_experts, 0)
        return self.hidden_size * self.moe.n_experts + shared

    @property
    def dense_mlp_params(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def total_params(self) -> int:
        n = self.n_layers * self.attn_params_per_layer + self.n_dense_layers * self.dense_mlp_params
        if self.moe is not None:
            n += self.n_moe_layers * (self.moe.n_experts * self.expert_params
                                      + self.moe_always_params_per_layer)
        n += self.embedding_params + (0 if self.tied_embeddings else self.lm_head_params)
        return n

    @property
    def active_params_per_token(self) -> int:
        """Weights one token multiplies through (embedding lookup excluded, LM head included)."""
        n = self.n_layers * self.attn_params_per_layer + self.n_dense_layers * self.dense_mlp_params
        if self.moe is not None:
            n += self.n_moe_layers * (self.moe.top_k * self.expert_params
                                      + self.moe_always_params_per_layer)
        return n + self.lm_head_params

    def kv_elements_per_token(self) -> int:
        """K and V elements stored per token over all layers."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim


_MODEL_REQUIRED = {"n_layers", "hidden_size", "n_heads", "n_kv_heads", "head_dim",
                   "intermediate_size", "vocab_size", "source"}
_MODEL_OPTIONAL = {"tied_embeddings", "max_context", "params_b", "moe", "mtp_layers",
                   "native_weight_format", "tokenizer", "notes"}
_MOE_REQUIRED = {"n_experts", "top_k", "expert_intermediate_size"}
_MOE_OPTIONAL = {"n_shared_experts", "shared_expert_intermediate_size", "first_dense_layers"}


def model_from_dict(name: str, entry: Any, where: str) -> ModelSpec:
    e = _check_keys(where, entry, _MODEL_REQUIRED, _MODEL_OPTIONAL)
    ints = {k: _num(f"{where}.{k}", e[k], positive=True, integer=True)
            for k in ("n_layers", "hidden_size", "n_heads", "n_kv_heads", "head_dim",
                      "vocab_size")}
    inter = _num(f"{where}.intermediate_size", e["intermediate_size"], integer=True,
                 positive=e.get("moe") is None)  # 0 only when every MLP is a MoE layer
    moe = None
    if e.get("moe") is not None:
        m = _check_keys(f"{where}.moe", e["moe"], _MOE_REQUIRED, _MOE_OPTIONAL)
        vals = {k: _num(f"{where}.moe.{k}", v, integer=True) for k, v in m.items()}
        if vals["top_k"] < 1 or vals["top_k"] > vals["n_experts"]:
            raise CatalogError(f"{where}.moe.top_k: expected 1..n_experts, got {vals['top_k']}")
        moe = MoESpec(**vals)
    if ints["n_heads"] % ints["n_kv_heads"]:
        raise CatalogError(f"{where}.n_kv_heads: expected a divisor of n_heads "
                           f"({ints['n_heads']}), got {ints['n_kv_heads']}")
    return ModelSpec(
        name=name,
        intermediate_size=inter,
        tied_embeddings=bool(e.get("tied_embeddings", False)),
        max_context=int(_num(f"{where}.max_context", e.get("max_context", 131072),
                             positive=True, integer=True)),
        params_b=float(_num(f"{where}.params_b", e.get("params_b", 0.0))),
        moe=moe,
        mtp_layers=int(_num(f"{where}.mtp_layers", e.get("mtp_layers", 0), integer=True)),
        native_weight_format=str(e.get("native_weight_format", "bf16")),
        tokenizer=str(e.get("tokenizer", name)),
        source=_str(f"{where}.source", e["source"]),
        notes=str(e.get("notes", "") or ""),
        **ints,
    )


def get_model(ref: Any, where: str = "model") -> ModelSpec:
    """A catalog name, or an inline mapping with the catalog's fields (plus ``name``)."""
    if isinstance(ref, str):
        cat = model_catalog()
        if ref not in cat:
            raise CatalogError(f"{where}: unknown model {ref!r} (catalog has: "
                               f"{', '.join(sorted(cat))})")
        return model_from_dict(ref, cat[ref], f"model catalog entry {ref}")
    if isinstance(ref, dict):
        entry = dict(ref)
        name = str(entry.pop("name", "inline-model"))
        return model_from_dict(name, entry, where)
    raise CatalogError(f"{where}: expected a catalog name or a mapping, got {ref!r}")


# ---------------------------------------------------------------- quantization


@dataclass(frozen=True)
class QuantFormat:
    """Storage and compute of one number format."""

    name: str
    bits: float
    scale_bits_per_element: float
    compute_dtype: str
    weight_only: bool
    dequant_overhead: float
    source: str

    @property
    def bytes_per_element(self) -> float:
        return (self.bits + self.scale_bits_per_element) / 8.0


def get_quant(name: Any, where: str) -> QuantFormat:
    cat = quant_catalog()
    if not isinstance(name, str) or name not in cat:
        raise CatalogError(f"{where}: unknown quantization format {name!r} (expected one of: "
                           f"{', '.join(sorted(cat))})")
    entry = cat[name]
    seen = {name}
    while "alias" in entry:
        target = entry["alias"]
        if target in seen or target not in cat:
            raise CatalogError(f"quantization catalog entry {name}: bad alias {target!r}")
        seen.add(target)
        entry = cat[target]
    return QuantFormat(
        name=name,
        bits=float(entry["bits"]),
        scale_bits_per_element=float(entry.get("scale_bits_per_element", 0.0)),
        compute_dtype=str(entry["compute_dtype"]),
        weight_only=bool(entry.get("weight_only", False)),
        dequant_overhead=float(entry.get("dequant_overhead", 0.0)),
        source=str(entry.get("source", "")),
    )


@dataclass(frozen=True)
class Precision:
    """Weights, activations and KV-cache formats of one model (target or drafter)."""

    weights: QuantFormat
    activations: QuantFormat
    kv_cache: QuantFormat
    extra: dict = field(default_factory=dict)

    @property
    def compute_dtype(self) -> str:
        """The tensor-core dtype for linear layers: the wider of weights and activations.

        Weight-only formats (int4) compute in the activation dtype after dequantisation.
        """
        order = {"fp4": 0, "fp8": 1, "int8": 1, "bf16": 2}
        w = self.activations.compute_dtype if self.weights.weight_only else self.weights.compute_dtype
        a = self.activations.compute_dtype
        return w if order.get(w, 2) >= order.get(a, 2) else a


def get_precision(section: dict | None, where: str) -> Precision:
    section = section or {}
    if not isinstance(section, dict):
        raise CatalogError(f"{where}: expected a mapping, got {section!r}")
    unknown = sorted(set(section) - {"weights", "activations", "kv_cache"})
    if unknown:
        raise CatalogError(f"{where}.{unknown[0]}: unknown key (expected weights, activations, "
                           "kv_cache)")
    return Precision(
        weights=get_quant(section.get("weights", "bf16"), f"{where}.weights"),
        activations=get_quant(section.get("activations", "bf16"), f"{where}.activations"),
        kv_cache=get_quant(section.get("kv_cache", "bf16"), f"{where}.kv_cache"),
    )
