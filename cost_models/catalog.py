"""Hardware, model and quantization catalogs.

The catalogs are YAML files shipped inside the package (``cost_models/data``), each entry
with a ``source:``. A scenario names an entry, or defines one inline with the same fields;
both go through the same validation so an inline entry cannot smuggle in a typo.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from specsim.yamlio import load_bundled

from .catalog_schema import (  # noqa: F401 (DTYPES and the bounds are re-exported)
    DTYPES,
    MAX_NUMBER,
    MIN_POSITIVE,
    Entry,
    HardwareEntry,
    ModelEntry,
    NonNegNum,
    QuantAlias,
    QuantEntry,
    Str,
    validate_entry,
)
from .errors import CatalogError


def _load_yaml(name: str) -> dict[str, Any]:
    text = resources.files(__package__).joinpath("data", name).read_text()
    return load_bundled(text, yaml12=False) or {}


@functools.cache
def hardware_catalog() -> dict[str, Any]:
    return _load_yaml("hardware.yaml")


@functools.cache
def model_catalog() -> dict[str, Any]:
    return _load_yaml("models.yaml")


@functools.cache
def quant_catalog() -> dict[str, Any]:
    return _load_yaml("quantization.yaml")


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
    # the host's DRAM per device and the host link per direction (a KV tier's defaults)
    host_memory_bytes: float | None = None
    host_link_bw: float | None = None
    host_source: str = ""
    # the network between nodes: devices per NVLink domain and each device's NIC per
    # direction (None: not in the catalog; everything priced as one NVLink domain)
    devices_per_node: int | None = None
    scale_out_bw: float | None = None

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


def hardware_from_dict(name: str, entry: Any, where: str) -> HardwareSpec:
    """An accelerator from its catalog fields (validated as a ``HardwareEntry``)."""
    e = validate_entry(HardwareEntry, entry, where)
    peaks = e.peak_tflops
    peak_flops = {d: (None if getattr(peaks, d) is None else getattr(peaks, d) * 1e12)
                  for d in type(peaks).model_fields if d in peaks.model_fields_set}
    return HardwareSpec(
        name=name,
        kind=e.kind,
        vendor=e.vendor or "",
        peak_flops=peak_flops,
        hbm_bytes=e.hbm_gb * 1e9,
        hbm_bw=e.hbm_bw_gb_s * 1e9,
        link_bw=e.interconnect.bw_gb_s * 1e9,
        link_latency_s=e.interconnect.latency_us * 1e-6,
        power_idle_w=float(e.power_w.idle),
        power_max_w=float(e.power_w.max),
        price_usd_per_hour=float(e.price_usd_per_hour),
        price_date=e.price_date,
        source=e.source,
        notes=e.notes or "",
        host_memory_bytes=(e.host.memory_gb_per_device * 1e9
                           if e.host and e.host.memory_gb_per_device else None),
        host_link_bw=e.host.link_gb_s * 1e9 if e.host and e.host.link_gb_s else None,
        host_source=e.host.source if e.host else "",
        devices_per_node=e.scale_out.devices_per_node if e.scale_out else None,
        scale_out_bw=e.scale_out.bw_gb_s * 1e9 if e.scale_out else None,
    )


def _named_or_inline(ref: Any, where: str, cat: dict[str, Any], kind: str, catalog: str,
                     build: Any) -> Any:
    """A catalog name (looked up in ``cat``), or an inline mapping with the catalog's fields
    (plus ``name``, default ``inline-<kind>``), built by ``build(name, entry, origin)``."""
    if isinstance(ref, str):
        if ref not in cat:
            raise CatalogError(f"{where}: unknown {kind} {ref!r} (catalog has: "
                               f"{', '.join(sorted(cat))})")
        return build(ref, cat[ref], f"{catalog} catalog entry {ref}")
    if isinstance(ref, dict):
        entry = dict(ref)
        name = str(entry.pop("name", f"inline-{kind}"))
        return build(name, entry, where)
    raise CatalogError(f"{where}: expected a catalog name or a mapping, got {ref!r}")


def get_hardware(ref: Any, where: str = "hardware.accelerator") -> HardwareSpec:
    """A catalog name, or an inline mapping with the catalog's fields (plus ``name``)."""
    return _named_or_inline(ref, where, hardware_catalog(), "accelerator", "hardware",
                            hardware_from_dict)


# ---------------------------------------------------------------- power by phase


class PowerCurveEntry(Entry):
    """One ``power.yaml`` entry: a device's power above idle, as fractions of max - idle."""

    host: NonNegNum
    compute: NonNegNum
    memory: NonNegNum
    source: Str


@dataclass(frozen=True)
class PowerCurve:
    """P = idle + (max - idle) x min(1, host + compute x u_compute + memory x u_memory): one
    curve for every phase of a step (``power.yaml`` says where each number comes from)."""

    accelerator: str  # the entry used: the accelerator's own, or "default"
    host: float
    compute: float
    memory: float
    source: str


@functools.cache
def power_curve(accelerator: str) -> PowerCurve:
    """The accelerator's power curve (``power.yaml``), else the labelled default."""
    cat = _load_yaml("power.yaml")
    name = accelerator if accelerator in cat else "default"
    e = validate_entry(PowerCurveEntry, cat[name], f"power catalog entry {name}")
    return PowerCurve(name, float(e.host), float(e.compute), float(e.memory), e.source)


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
class MLASpec:
    """Multi-head latent attention's shape (``catalog_schema.MLAEntry``)."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int = 0


@dataclass(frozen=True)
class LinearAttnSpec:
    """A Gated DeltaNet layer's shape (``catalog_schema.LinearAttnEntry``)."""

    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int = 4
    state_bytes_per_element: float | None = None

    @property
    def conv_dim(self) -> int:
        """Channels of the causal conv (q, k and v projections)."""
        return 2 * self.num_key_heads * self.key_head_dim + self.num_value_heads * self.value_head_dim


@dataclass(frozen=True)
class AttentionSpec:
    """The layers' attention kinds: ``pattern`` repeated over the model's layers."""

    pattern: tuple[str, ...]
    window: int | None = None
    mla: MLASpec | None = None
    linear: LinearAttnSpec | None = None
    output_gate: bool = False
    source: str = ""


@dataclass(frozen=True)
class KVSizes:
    """What one sequence keeps, per device of a tensor-parallel group (``ModelSpec.kv_sizes``):
    bytes per token of the layers whose KV grows with context (full attention and MLA), bytes
    per token of the sliding-window layers (held for at most ``window`` tokens), and bytes of
    the linear layers' recurrent + conv state (constant, per sequence)."""

    full_per_token: float
    window_per_token: float
    window: int
    state_per_seq: float

    @property
    def per_token(self) -> float:
        """KV bytes per cached token, window layers counted in full (a block pool that does
        not free blocks that slid out of the window)."""
        return self.full_per_token + self.window_per_token

    def sequence_bytes(self, context: float) -> float:
        """Bytes one sequence of ``context`` tokens holds: full KV, the window's KV capped at
        ``window`` tokens, the state once."""
        w = min(context, self.window) if self.window else 0.0
        return self.full_per_token * context + self.window_per_token * w + self.state_per_seq


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
    attention: AttentionSpec | None = None  # None: every layer gqa

    # --- parameter counts (elements), computed from the shape, not the published total
    @property
    def attn_params_per_layer(self) -> int:
        """A gqa (or sliding-window) layer's q, k, v, o projections (q doubled when it also
        emits an output gate)."""
        q_o = 2 * self.hidden_size * self.n_heads * self.head_dim
        k_v = 2 * self.hidden_size * self.n_kv_heads * self.head_dim
        gate = self.hidden_size * self.n_heads * self.head_dim if (
            self.attention is not None and self.attention.output_gate) else 0
        return q_o + k_v + gate

    def layers_of(self, kind: str) -> int:
        """Layers of attention ``kind`` (gqa, mla, sliding_window, linear): the pattern
        repeated over ``n_layers``."""
        if self.attention is None:
            return self.n_layers if kind == "gqa" else 0
        pat = self.attention.pattern
        return sum(1 for i in range(self.n_layers) if pat[i % len(pat)] == kind)

    def kind_params_per_layer(self, kind: str) -> int:
        """Projection weights of one layer of ``kind`` (MLA: q down/up or q, kv down with the
        rope key, kv up, o; linear (Gated DeltaNet, vLLM qwen3_next.py): in_proj_qkvz,
        in_proj_ba, conv1d, out_proj)."""
        h = self.hidden_size
        a = self.attention
        if kind == "mla" and a is not None and a.mla is not None:
            m, nh = a.mla, self.n_heads
            qk = m.qk_nope_head_dim + m.qk_rope_head_dim
            q = (h * m.q_lora_rank + m.q_lora_rank * nh * qk) if m.q_lora_rank else h * nh * qk
            kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank * nh * (
                m.qk_nope_head_dim + m.v_head_dim)
            return q + kv + nh * m.v_head_dim * h
        if kind == "linear" and a is not None and a.linear is not None:
            li = a.linear
            v = li.num_value_heads * li.value_head_dim
            qkvz = h * (2 * li.num_key_heads * li.key_head_dim + 2 * v)
            return qkvz + h * 2 * li.num_value_heads + li.conv_dim * li.conv_kernel + v * h
        return self.attn_params_per_layer

    @property
    def attn_params(self) -> int:
        """Attention (token-mixing) weights of all layers, by kind."""
        if self.attention is None:
            return self.n_layers * self.attn_params_per_layer
        return sum(self.layers_of(k) * self.kind_params_per_layer(k)
                   for k in ("gqa", "mla", "sliding_window", "linear"))

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
        n = self.attn_params + self.n_dense_layers * self.dense_mlp_params
        if self.moe is not None:
            n += self.n_moe_layers * (self.moe.n_experts * self.expert_params
                                      + self.moe_always_params_per_layer)
        n += self.embedding_params + (0 if self.tied_embeddings else self.lm_head_params)
        return n

    @property
    def active_params_per_token(self) -> int:
        """Weights one token multiplies through (embedding lookup excluded, LM head included)."""
        n = self.attn_params + self.n_dense_layers * self.dense_mlp_params
        if self.moe is not None:
            n += self.n_moe_layers * (self.moe.top_k * self.expert_params
                                      + self.moe_always_params_per_layer)
        return n + self.lm_head_params

    def kv_elements_per_token(self) -> int:
        """K and V elements stored per token over all layers whose KV grows with context
        (gqa: K and V per KV head; MLA: one latent of kv_lora_rank + rope dims; sliding
        windows are ``window_kv_elements_per_token``, linear layers keep none)."""
        gqa = 2 * self.layers_of("gqa") * self.n_kv_heads * self.head_dim
        a = self.attention
        if a is None or a.mla is None:
            return gqa
        return gqa + self.layers_of("mla") * (a.mla.kv_lora_rank + a.mla.qk_rope_head_dim)

    def window_kv_elements_per_token(self) -> int:
        """K and V elements per token of the sliding-window layers (kept for ``window``
        tokens)."""
        return 2 * self.layers_of("sliding_window") * self.n_kv_heads * self.head_dim

    def state_elements_per_seq(self) -> int:
        """The linear layers' constant state per sequence: the recurrent state (value heads x
        key dim x value dim) and the causal conv's last ``conv_kernel - 1`` inputs."""
        a = self.attention
        if a is None or a.linear is None:
            return 0
        li = a.linear
        per_layer = (li.num_value_heads * li.key_head_dim * li.value_head_dim
                     + (li.conv_kernel - 1) * li.conv_dim)
        return self.layers_of("linear") * per_layer

    def kv_sizes(self, kv_bytes_per_element: float, tp: int) -> KVSizes:
        """KV bytes per token and state bytes per sequence on each device of a
        ``tp``-way group: the one place deployment (blocks per worker), KV tiers, PD transfer
        and the roofline's KV read take them from. Heads shard over the group; MLA's latent
        is shared by all heads, so every device keeps all of it (vLLM's and SGLang's MLA
        backends replicate the latent cache across tensor-parallel ranks)."""
        a = self.attention
        # KV heads per device: a share of them, or one copy each when the group has more
        # devices than KV heads (vLLM's QKVParallelLinear replicates a KV head then)
        kv_dev = max(self.n_kv_heads / tp, 1.0) if a is not None else self.n_kv_heads / tp
        per_head = 2 * self.head_dim * kv_bytes_per_element
        full = self.layers_of("gqa") * kv_dev * per_head
        if a is not None and a.mla is not None:
            full += (self.layers_of("mla") * (a.mla.kv_lora_rank + a.mla.qk_rope_head_dim)
                     * kv_bytes_per_element)
        win = self.layers_of("sliding_window") * kv_dev * per_head
        state = 0.0
        if a is not None and a.linear is not None:
            li, nl = a.linear, self.layers_of("linear")
            sb = li.state_bytes_per_element or kv_bytes_per_element
            # the recurrent state in its own format (Qwen3.5/3.6: mamba_ssm_dtype float32),
            # the conv's last inputs in the KV cache's (SGLang's mamba pool does the same)
            state = nl * (li.num_value_heads * li.key_head_dim * li.value_head_dim * sb
                          + (li.conv_kernel - 1) * li.conv_dim * kv_bytes_per_element) / tp
        return KVSizes(full, win, int(a.window or 0) if a is not None else 0, state)


def model_from_dict(name: str, entry: Any, where: str) -> ModelSpec:
    """A model shape from its catalog fields (validated as a ``ModelEntry``)."""
    e = validate_entry(ModelEntry, entry, where)
    return ModelSpec(
        name=name,
        n_layers=e.n_layers,
        hidden_size=e.hidden_size,
        n_heads=e.n_heads,
        n_kv_heads=e.n_kv_heads,
        head_dim=e.head_dim,
        intermediate_size=e.intermediate_size,
        vocab_size=e.vocab_size,
        tied_embeddings=e.tied_embeddings,
        max_context=e.max_context,
        params_b=float(e.params_b),
        moe=None if e.moe is None else MoESpec(**e.moe.model_dump()),
        mtp_layers=e.mtp_layers,
        native_weight_format=e.native_weight_format,
        tokenizer=name if e.tokenizer is None else e.tokenizer,
        source=e.source,
        notes=e.notes or "",
        attention=None if e.attention is None else _attention(e.attention),
    )


def _attention(a: Any) -> AttentionSpec:
    """The validated ``attention:`` block as a spec."""
    return AttentionSpec(
        pattern=tuple(a.pattern), window=a.window,
        mla=None if a.mla is None else MLASpec(**a.mla.model_dump()),
        linear=None if a.linear is None else LinearAttnSpec(**a.linear.model_dump()),
        output_gate=a.output_gate, source=a.source or "")


def get_model(ref: Any, where: str = "model") -> ModelSpec:
    """A catalog name, or an inline mapping with the catalog's fields (plus ``name``)."""
    return _named_or_inline(ref, where, model_catalog(), "model", "model", model_from_dict)


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
    entry, target = cat[name], name
    seen = {name}
    while isinstance(entry, dict) and "alias" in entry:
        alias = validate_entry(QuantAlias, entry, f"quantization catalog entry {target}")
        target = alias.alias
        if target in seen or target not in cat:
            raise CatalogError(f"quantization catalog entry {name}: bad alias {target!r}")
        seen.add(target)
        entry = cat[target]
    q = validate_entry(QuantEntry, entry, f"quantization catalog entry {target}")
    return QuantFormat(
        name=name,
        bits=float(q.bits),
        scale_bits_per_element=float(q.scale_bits_per_element),
        compute_dtype=q.compute_dtype,
        weight_only=q.weight_only,
        dequant_overhead=float(q.dequant_overhead),
        source=q.source,
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
