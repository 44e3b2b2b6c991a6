"""Typed catalog entries: one pydantic model per entry shape, extra keys forbidden everywhere.

These are the shapes the YAML catalogs (``cost_models/data``) hold and the inline mappings a
scenario may give for ``hardware.accelerator``, ``model`` and ``speculation.drafter``. Every
number is finite and at most ``MAX_NUMBER``; a positive one is at least ``MIN_POSITIVE``.
``catalog_error`` turns a ``ValidationError`` into the one-line ``CatalogError`` naming
``where`` and the dotted key (with "did you mean" for near-miss keys). The runtime
dataclasses (``HardwareSpec``, ``ModelSpec``, ...) are built from these in ``catalog``.
"""

from __future__ import annotations

import datetime
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from specsim import values
from specsim.messages import fail, fail_key, own_message, show, unknown_key

from .errors import CatalogError

DTYPES = ("bf16", "fp8", "int8", "fp4")
KINDS = ("gpu", "tpu", "ppu", "cpu")
MAX_NUMBER = 1e15  # a sanity bound on every catalog number (inline entries included)
MIN_POSITIVE = 1e-6  # and on the smallest positive one (TFLOP/s, GB, GB/s, W)


def _show(value: Any) -> str:
    return show(value, 60)


def _g(x: float) -> str:
    """A number as the messages quote it: 700, 0.5, 1e+15."""
    return f"{x:g}"


# ------------------------------------------------------------------ value rules


def _number(positive: bool, integer: bool, nullable: bool):
    """The shared rule (``specsim.values.number``) with the catalog's bounds: at most
    ``MAX_NUMBER`` (sizes and rates beyond it overflow the cost model's floats); a positive
    number at least ``MIN_POSITIVE`` (1e-300 GB/s would make times overflow to inf), a
    positive integer at least 1."""
    lo = (1 if integer else MIN_POSITIVE) if positive else 0

    def check(value: Any) -> Any:
        try:
            return values.number(value, integer=integer, lo=lo, hi=MAX_NUMBER,
                                 nullable=nullable)
        except values.ValueRuleError as exc:
            raise fail(str(exc)) from None

    return check


def _num_type(positive: bool, integer: bool, nullable: bool) -> Any:
    base: Any = int if integer else float
    if nullable:
        base = base | None
    bounds: dict[str, Any] = {"maximum": MAX_NUMBER}
    bounds["minimum"] = MIN_POSITIVE if positive and not integer else (1 if positive else 0)
    return Annotated[base, BeforeValidator(_number(positive, integer, nullable)),
                     Field(json_schema_extra=bounds)]


PosNum = _num_type(True, False, False)
OptPosNum = _num_type(True, False, True)
NonNegNum = _num_type(False, False, False)
PosInt = _num_type(True, True, False)
NonNegInt = _num_type(False, True, False)
OptPosInt = _num_type(True, True, True)


def _text(nullable: bool = False, dates: bool = False):
    def check(value: Any) -> Any:
        if value is None and nullable:
            return None
        if dates and isinstance(value, datetime.date):  # price_date: 2026-01-15 unquoted
            return value.isoformat()
        if not isinstance(value, str):
            raise fail(f"expected a string, got {_show(value)}")
        return value

    return check


def _choice(choices: tuple[str, ...]):
    def check(value: Any) -> Any:
        try:
            return values.choice(value, choices)
        except values.ValueRuleError as exc:
            raise fail(str(exc)) from None

    return check


def _bool(value: Any) -> Any:
    if not isinstance(value, bool):
        raise fail(f"expected true or false, got {_show(value)}")
    return value


Str = Annotated[str, BeforeValidator(_text())]
OptStr = Annotated[str | None, BeforeValidator(_text(nullable=True))]
DateStr = Annotated[str, BeforeValidator(_text(dates=True))]
Bool = Annotated[bool, BeforeValidator(_bool)]


def Choice(*choices: str) -> Any:  # noqa: N802 (a type factory)
    return Annotated[str, BeforeValidator(_choice(choices)),
                     Field(json_schema_extra={"enum": list(choices)})]


# ------------------------------------------------------------------ entries


class Entry(BaseModel):
    """A catalog mapping: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class PeakTflops(Entry):
    """Dense tensor-core peak per dtype, TFLOP/s; null = no such path on the chip."""

    bf16: OptPosNum
    fp16: OptPosNum = None
    fp8: OptPosNum = None
    int8: OptPosNum = None
    fp4: OptPosNum = None


class Interconnect(Entry):
    bw_gb_s: PosNum
    latency_us: NonNegNum
    name: OptStr = None


class HostMemory(Entry):
    """The host a device sits in: its share of system DRAM and its host link (a KV tier's
    defaults); either may be null where no public source gives it."""

    memory_gb_per_device: OptPosNum = None
    link_gb_s: OptPosNum = None  # per direction
    source: Str


class ScaleOut(Entry):
    """The network between nodes: devices per node (one NVLink domain) and each device's
    own NIC bandwidth per direction (EP groups wider than a node send their other-node
    share over it)."""

    devices_per_node: PosInt
    bw_gb_s: PosNum  # per device, per direction
    source: Str


class PowerW(Entry):
    idle: NonNegNum
    max: PosNum

    @model_validator(mode="after")
    def _idle_at_most_max(self) -> PowerW:
        if self.idle > self.max:
            raise fail_key("idle", f"expected at most power_w.max ({_g(self.max)}), "
                                    f"got {_g(self.idle)}")
        return self


class HardwareEntry(Entry):
    """One accelerator of ``hardware.yaml`` (or an inline ``hardware.accelerator``)."""

    kind: Choice(*KINDS)
    peak_tflops: PeakTflops
    hbm_gb: PosNum
    hbm_bw_gb_s: PosNum
    interconnect: Interconnect
    power_w: PowerW
    price_usd_per_hour: NonNegNum
    source: Str
    vendor: OptStr = None
    price_date: DateStr = ""
    notes: OptStr = None
    host: HostMemory | None = None
    scale_out: ScaleOut | None = None


class MoEEntry(Entry):
    n_experts: NonNegInt
    top_k: NonNegInt
    expert_intermediate_size: NonNegInt
    n_shared_experts: NonNegInt = 0
    shared_expert_intermediate_size: NonNegInt = 0
    first_dense_layers: NonNegInt = 0

    @model_validator(mode="after")
    def _top_k_in_range(self) -> MoEEntry:
        if self.top_k < 1 or self.top_k > self.n_experts:
            raise fail_key("top_k", f"expected 1..n_experts, got {self.top_k}")
        return self


LAYER_KINDS = ("gqa", "mla", "sliding_window", "linear")


class MLAEntry(Entry):
    """Multi-head latent attention (DeepSeek-V2/V3 config.json names): the KV cache holds
    one latent of ``kv_lora_rank`` + ``qk_rope_head_dim`` per token per layer."""

    kv_lora_rank: PosInt
    qk_rope_head_dim: PosInt
    qk_nope_head_dim: PosInt
    v_head_dim: PosInt
    q_lora_rank: NonNegInt = 0  # 0: a plain q projection (DeepSeek-V2-Lite)


class LinearAttnEntry(Entry):
    """A linear-attention layer (Gated DeltaNet, Qwen3-Next / Qwen3.5 config.json names):
    a recurrent state of ``num_value_heads`` x ``key_head_dim`` x ``value_head_dim`` per
    sequence plus a causal-conv state of ``conv_kernel - 1`` inputs; no KV per token."""

    num_key_heads: PosInt
    num_value_heads: PosInt
    key_head_dim: PosInt
    value_head_dim: PosInt
    conv_kernel: PosInt = 4
    state_bytes_per_element: OptPosNum = None  # the recurrent state's; None: the KV cache's


class AttentionEntry(Entry):
    """The layers' attention kinds: ``pattern`` repeated over ``n_layers`` (e.g. [linear,
    linear, linear, gqa]), with each kind's shape."""

    pattern: list[Choice(*LAYER_KINDS)]
    window: OptPosInt = None  # sliding_window layers: keys attended per query
    mla: MLAEntry | None = None
    linear: LinearAttnEntry | None = None
    output_gate: Bool = False  # gqa/window layers: q_proj also emits a sigmoid gate
    source: OptStr = None

    @model_validator(mode="after")
    def _kinds_have_shapes(self) -> AttentionEntry:
        if not self.pattern:
            raise fail_key("pattern", "expected a non-empty list of layer kinds")
        need = {"mla": self.mla, "sliding_window": self.window, "linear": self.linear}
        for kind, shape in need.items():
            if kind in self.pattern and shape is None:
                key = "window" if kind == "sliding_window" else kind
                raise fail_key(key, f"expected the {kind} layers' shape (the pattern has "
                                    f"{kind} layers)")
        return self


class ModelEntry(Entry):
    """One model of ``models.yaml`` (or an inline ``model`` / ``speculation.drafter``)."""

    n_layers: PosInt
    hidden_size: PosInt
    n_heads: PosInt
    n_kv_heads: PosInt
    head_dim: PosInt
    intermediate_size: NonNegInt  # 0 only when every MLP is a MoE layer
    vocab_size: PosInt
    source: Str
    tied_embeddings: Bool = False
    max_context: PosInt = 131072
    params_b: NonNegNum = 0.0
    moe: MoEEntry | None = None
    mtp_layers: NonNegInt = 0
    native_weight_format: Str = "bf16"
    tokenizer: OptStr = None
    notes: OptStr = None
    attention: AttentionEntry | None = None  # None: every layer gqa

    @model_validator(mode="after")
    def _shape(self) -> ModelEntry:
        if self.moe is None and self.intermediate_size == 0:
            raise fail_key("intermediate_size", "expected an integer at least 1, got 0")
        if self.n_heads % self.n_kv_heads:
            raise fail_key("n_kv_heads", f"expected a divisor of n_heads ({self.n_heads}), "
                                          f"got {self.n_kv_heads}")
        return self


class QuantEntry(Entry):
    """One number format of ``quantization.yaml``."""

    bits: PosNum
    compute_dtype: Choice(*DTYPES)
    source: Str
    scale_bits_per_element: NonNegNum = 0.0
    weight_only: Bool = False
    dequant_overhead: NonNegNum = 0.0
    notes: OptStr = None


class QuantAlias(Entry):
    """Another name for a format of ``quantization.yaml``."""

    alias: Str
    source: OptStr = None
    notes: OptStr = None


class Catalogs(Entry):
    """The three bundled catalog files, by entry name."""

    hardware: dict[str, HardwareEntry] = {}
    models: dict[str, ModelEntry] = {}
    quantization: dict[str, QuantEntry | QuantAlias] = {}


# ------------------------------------------------------------------ errors as one line


def _keys_of(root: type[BaseModel], loc: tuple) -> list[str]:
    """The keys allowed in the mapping that holds ``loc[-1]``."""
    cls: type[BaseModel] = root
    for part in loc[:-1]:
        field = cls.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            return []
        sub = [a for a in getattr(field.annotation, "__args__", (field.annotation,))
               if isinstance(a, type) and issubclass(a, BaseModel)]
        if not sub:
            return []
        cls = sub[0]
    return list(cls.model_fields)


def _pick(errors: list[dict[str, Any]]) -> dict[str, Any]:
    """Unknown keys first (a typo explains the "missing" key next to it), then the first."""
    for kind in ("extra_forbidden", "invalid_key"):
        for err in errors:
            if err["type"] == kind:
                return err
    return errors[0]


def catalog_error(exc: ValidationError, where: str, root: type[BaseModel]) -> CatalogError:
    """The first problem of a failed entry validation, as one line naming ``where`` + key."""
    err = _pick(exc.errors(include_url=False))
    loc = tuple(err["loc"])
    path = ".".join([where, *(str(p) for p in loc)])
    kind = err["type"]
    own = own_message(err, path)
    if own is not None:
        return CatalogError(own)
    if kind == "extra_forbidden":
        return CatalogError(f"{path}: " + unknown_key(loc[-1], _keys_of(root, loc)))
    if kind == "invalid_key":
        return CatalogError(f"{path}: unknown key (keys are names, got {_show(loc[-1])})")
    if kind == "missing":
        return CatalogError(f"{path}: required key is missing")
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return CatalogError(f"{path}: expected a mapping, got {type(err.get('input')).__name__}")
    return CatalogError(f"{path}: {err['msg']}")


def validate_entry(cls: type[Entry], entry: Any, where: str) -> Any:
    """``entry`` as a ``cls``, or a one-line ``CatalogError``."""
    if not isinstance(entry, dict):
        raise CatalogError(f"{where}: expected a mapping, got {type(entry).__name__}")
    try:
        return cls.model_validate(entry)
    except ValidationError as exc:
        raise catalog_error(exc, where, cls) from None


def catalog_json_schema() -> dict[str, Any]:
    """JSON Schema of the catalog files and their entries (for editors and tools)."""
    schema = Catalogs.model_json_schema()
    schema["title"] = "specsim catalogs"
    schema["description"] = ("hardware.yaml, models.yaml and quantization.yaml, by entry name; "
                             "an inline hardware.accelerator is a HardwareEntry (plus name), "
                             "an inline model or speculation.drafter a ModelEntry (plus name)")
    return schema
