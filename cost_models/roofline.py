"""Roofline price of one forward pass over a batch (DESIGN.md, "Cost model").

A pass over sequences i with q_i new tokens and attended context c_i costs, per op group
(linear layers, attention, elementwise), max(FLOPs / (peak * eta), bytes / (BW * eta)) with
each group's own efficiencies, plus tensor-parallel all-reduce and fixed overheads
(``ForwardCostModel`` says how). The price depends only on a few batch aggregates, so callers reduce the batch once
(``BatchShape``) and pricing is O(1); every method also accepts numpy arrays of aggregates so
many candidate passes can be priced at once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .calibration import Calibration
from .catalog import HardwareSpec, ModelSpec, Precision
from .errors import CatalogError
from .routing import SKEW_POINTS


def attention_area(q, ctx):
    """Causal attention area of ``q`` new tokens over ``ctx`` cached ones: q*ctx + q(q+1)/2.

    Query i (1-based) attends ctx + i positions. The one place this is written; works on
    scalars and arrays.
    """
    return q * ctx + q * (q + 1) / 2


def cross_node_allreduce(tp: int, node: int, link: float, nic: float, cal: Calibration,
                         lat: float) -> tuple[float, float]:
    """(seconds per ring byte, seconds per all-reduce) of a tensor-parallel group of ``tp``
    devices wider than a node of ``node`` (``scale_out.devices_per_node``), spread evenly
    over ceil(tp / node) nodes, n = tp / nodes devices in each.

    A ring all-reduce moves 2 (tp - 1) / tp x S bytes through every device; NCCL runs one
    ring per channel, each crossing every node boundary once, with the channels spread over
    the node's n NICs, so a node's cross-node traffic (the same 2 (tp - 1) / tp x S) leaves
    over n NICs in parallel while the rest moves over NVLink: per ring byte
    max(1 / (link x eff), 1 / (n x NIC x eff_nic)), the slower side setting the time (as the
    expert-parallel all-to-all prices it). ``link`` is the NVLink bandwidth already scaled by
    ``allreduce_bw_eff``; ``nic`` each device's NIC per direction; eff_nic
    ``allreduce_nic_bw_eff`` (None: ``allreduce_bw_eff``); the latency
    ``allreduce_nic_latency_s`` (None: ``lat``, the NVLink one)."""
    n = devices_per_spanned_node(tp, node)
    eff, nic_lat = nic_terms(cal, lat)
    return max(1.0 / link, 1.0 / (n * nic * eff)), nic_lat


def devices_per_spanned_node(group: int, node: int) -> float:
    """Devices in each node of a group of ``group`` devices spread evenly over the fewest
    nodes of ``node`` devices that hold it: group / ceil(group / node) (the all-reduce's and
    the expert-parallel all-to-all's split)."""
    return group / -(-group // node)


def nic_terms(cal: Calibration, lat: float) -> tuple[float, float]:
    """(NIC bandwidth share, NIC latency) of a collective that crosses nodes: the profile's
    ``allreduce_nic_bw_eff`` / ``allreduce_nic_latency_s``, each unset falling back to its
    NVLink counterpart (``allreduce_bw_eff``, ``lat``)."""
    eff = cal.allreduce_nic_bw_eff if cal.allreduce_nic_bw_eff is not None else cal.allreduce_bw_eff
    return eff, cal.allreduce_nic_latency_s if cal.allreduce_nic_latency_s is not None else lat


def _rule():
    """``pass_rule``, imported on first pricing: it loads numba, which ``specsim validate``
    and a scenario's memory check never need (tests/test_startup.py)."""
    from specsim.cost_models import pass_rule

    return pass_rule


def _overheads(kind: int, coef: tuple[float, float, float], a, b) -> np.ndarray:
    """``pass_rule.engine_overhead`` (kind 0) / ``spec_overhead`` (kind 1) over arrays."""
    x, y = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64))
    out = np.empty(x.size)
    _rule().overheads_many(kind, *(float(v) for v in coef), np.ascontiguousarray(x).ravel(),
                           np.ascontiguousarray(y).ravel(), out)
    return out.reshape(x.shape)


@dataclass(frozen=True)
class BatchShape:
    """Aggregates of a batch that the roofline needs.

    tokens: sum of q_i; qc: attention area, sum of q_i * c_i + q_i (q_i + 1) / 2; ctx: sum of
    c_i, the cached context each sequence reads; logits: tokens that need the LM head (decode
    and verify tokens, one per prefill that completes).
    """

    tokens: float
    qc: float
    ctx: float
    logits: float

    @staticmethod
    def of(q: np.ndarray, c: np.ndarray, logits: float | None = None) -> BatchShape:
        q = np.asarray(q, dtype=np.float64)
        c = np.asarray(c, dtype=np.float64)
        t = float(q.sum())
        return BatchShape(t, float(attention_area(q, c).sum()), float(c.sum()),
                          t if logits is None else logits)


@dataclass(frozen=True)
class PassCost:
    """A priced pass: total time and its parts (seconds), work and bytes per device."""

    time_s: float
    compute_s: float
    memory_s: float
    comm_s: float
    overhead_s: float
    flops: float
    bytes: float
    compute_util: float  # achieved FLOP/s over datasheet peak
    memory_util: float  # achieved bytes/s over datasheet bandwidth


class ForwardCostModel:
    """Prices forward passes of one model on one tensor-parallel group of one accelerator.

    Per op group, from batch aggregates (O(1) per pass):
    - linear layers (QKV, O, MLP or routed experts, LM head): max(FLOPs / (peak * eta_c(T)),
      weight bytes / (BW * eta_m)), where eta_c(T) = eta_c * T / (T + T_half) says small
      matmuls run far from peak;
    - elementwise (norms and residual adds, replicated on every device; rope and the MLP
      activation, sharded): bytes / (BW * eta_elementwise);
    - attention: max(FLOPs over the causal area / (bf16 peak * eta_attn_prefill), KV bytes
      read / (BW * eta_attn_decode));
    - tensor-parallel all-reduce, two per layer: latency + ring bytes / (link BW * eff)
      (a group wider than a node: the NICs' terms, ``cross_node_allreduce``);
    - fixed costs: a floor per layer (kernel launches and tails) and one per pass (a
      drafter's passes pay ``draft_layer_overhead_s`` and ``draft_pass_overhead_s``).
    The engine's CPU work per iteration and speculation's per-step work are not passes:
    ``iteration_overhead`` and ``speculation_overhead`` price them for the executor.
    """

    def __init__(self, model: ModelSpec, hardware: HardwareSpec, tp: int, precision: Precision,
                 calibration: Calibration, role: str = "target") -> None:
        if tp < 1:
            raise CatalogError(f"hardware.tensor_parallel: expected a positive integer, got {tp}")
        self.model, self.hw, self.tp, self.prec, self.cal = model, hardware, tp, precision, calibration
        self.role = role
        m, cal = model, calibration
        self.linear_peak, self.linear_dtype = hardware.peak(precision.compute_dtype)
        self.attn_peak, _ = hardware.peak("bf16")
        eff_c, eff_m = cal.eta_compute, cal.eta_memory
        eff_ew = cal.eta_elementwise if cal.eta_elementwise is not None else eff_m
        eff_ap = cal.eta_attn_prefill if cal.eta_attn_prefill is not None else eff_c
        eff_ad = cal.eta_attn_decode if cal.eta_attn_decode is not None else eff_m
        w_b = precision.weights.bytes_per_element
        a_b = precision.activations.bytes_per_element
        kv_b = precision.kv_cache.bytes_per_element
        self.kv_sizes = m.kv_sizes(kv_b, tp)  # per device, by layer kind
        if m.attention is None:
            self.kv_bytes_per_token = m.kv_elements_per_token() * kv_b  # whole model, all devices
        else:  # as if sharded: deployment divides by tp (MLA's latent is on every device)
            self.kv_bytes_per_token = self.kv_sizes.per_token * tp

        # Linear layers: FLOPs per token, and weight bytes (per device).
        lin_active = m.active_params_per_token - m.lm_head_params
        self._lin_flops_per_token = 2.0 * lin_active / tp
        self._head_flops_per_logit = 2.0 * m.lm_head_params / tp
        self._t_half = float(cal.matmul_half_tokens)
        dense_w = (m.attn_params + m.n_dense_layers * m.dense_mlp_params
                   + m.n_moe_layers * m.moe_always_params_per_layer + m.lm_head_params)
        self._dense_weight_bytes = dense_w * w_b / tp
        self._expert_bytes = m.expert_params * w_b / tp  # one expert, one layer
        inter_eff = m.intermediate_size if m.moe is None else m.moe.top_k * m.moe.expert_intermediate_size
        # Elementwise bytes per token: two norms (read + write the hidden state) and two
        # residual adds (two reads, one write) on every device; rope over the q and k heads
        # and the gated activation (read gate and up, write one) sharded over the group.
        h = m.hidden_size
        replicated = m.n_layers * (2 * 2 * h + 2 * 3 * h)
        sharded = m.n_layers * (2 * 2 * (m.n_heads + m.n_kv_heads) * m.head_dim
                                + 3 * inter_eff) / tp
        self._ew_bytes_per_token = (replicated + sharded) * a_b
        # Attention.
        if m.attention is None:
            self._attn_flops_per_qc = 4.0 * m.n_heads * m.head_dim * m.n_layers / tp
            self._kv_bytes_per_ctx = self.kv_bytes_per_token / tp
        else:
            self._attn_flops_per_qc = self._kind_attention(m, tp)
            self._kv_bytes_per_ctx = self.kv_sizes.full_per_token
        self._layer_kinds(m, tp)
        # Roofline denominators.
        self._lin_rate = self.linear_peak * eff_c
        self._attn_rate = self.attn_peak * eff_ap
        self._bw = hardware.hbm_bw * eff_m
        self._ew_bw = hardware.hbm_bw * eff_ew
        self._attn_bw = hardware.hbm_bw * eff_ad
        self._dequant = precision.weights.dequant_overhead if precision.weights.weight_only else 0.0
        # Tensor parallel: two all-reduces per layer of T x hidden activations (ring).
        if tp > 1:
            ring = 2.0 * (tp - 1) / tp
            link = hardware.link_bw * cal.allreduce_bw_eff
            lat = (cal.allreduce_latency_s if cal.allreduce_latency_s is not None
                   else hardware.link_latency_s)
            node, nic = hardware.devices_per_node, hardware.scale_out_bw
            if node and nic and tp > node:  # the group spans nodes: ``cross_node_allreduce``
                per_byte, lat = cross_node_allreduce(tp, node, link, nic, cal, lat)
                self._comm_per_token = 2 * m.n_layers * ring * h * a_b * per_byte
            else:
                self._comm_per_token = 2 * m.n_layers * ring * h * a_b / link
            self._comm_fixed = 2 * m.n_layers * lat
        else:
            self._comm_per_token = 0.0
            self._comm_fixed = 0.0
        # kernel floors: per pass and per layer; a drafter's passes pay their own where a
        # profile has them (small passes in an engine: launches and tails, not bandwidth)
        per_pass, per_layer = cal.fixed_overhead_s, cal.per_layer_overhead_s
        if role == "drafter":
            if cal.draft_pass_overhead_s is not None:
                per_pass = cal.draft_pass_overhead_s
            if cal.draft_layer_overhead_s is not None:
                per_layer = cal.draft_layer_overhead_s
        self._overhead = per_pass + per_layer * m.n_layers
        # mixture of experts: routed-expert weights per expert over all MoE layers, and the
        # chance a token misses a given expert (``pass_rule.experts_touched``)
        if m.moe is not None:
            e = float(m.moe.n_experts)
            self._moe_bytes_per_expert = m.n_moe_layers * self._expert_bytes
            self._moe_experts, self._moe_miss = e, 1.0 - m.moe.top_k / e
        else:
            self._moe_bytes_per_expert, self._moe_experts, self._moe_miss = 0.0, 0.0, 0.0
        # expert parallelism's routing skew (``expert_parallel``): none unless it sets one
        self._moe_routed_flops, self._a2a_skewed = 0.0, 0.0
        self._skew_table = np.zeros(SKEW_POINTS)
        # what expert parallelism adds (``expert_parallel``): EPLB's replicas, dp_attention's
        # copied weights (resident bytes per device) and its all-to-all bytes per token
        self.redundant_experts, self._extra_resident, self._a2a_bytes_per_token = 0, 0.0, 0.0
        self._params: np.ndarray | None = None

    @staticmethod
    def _kind_attention(m: ModelSpec, tp: int) -> float:
        """Attention FLOPs per unit of causal area of the layers whose keys grow with
        context: gqa 4 x heads x head_dim (QK^T and PV); MLA with the absorbed projections
        (decode, as vLLM's and SGLang's MLA backends run it: scores over the latent and the
        rope key, values over the latent) 2 x heads x (kv_lora_rank + rope) + 2 x heads x
        kv_lora_rank (prefill's unabsorbed form, 2 x heads x (nope + rope + v), is cheaper:
        an overstatement there)."""
        f = 4.0 * m.n_heads * m.head_dim * m.layers_of("gqa")
        a = m.attention
        if a is not None and a.mla is not None:
            la = a.mla
            f += (2.0 * m.n_heads * (la.kv_lora_rank + la.qk_rope_head_dim)
                  + 2.0 * m.n_heads * la.kv_lora_rank) * m.layers_of("mla")
        return f / tp

    def _layer_kinds(self, m: ModelSpec, tp: int) -> None:
        """The pass rule's entries for sliding-window and linear layers (zero without
        them): a window layer as gqa with its keys capped; a Gated DeltaNet layer's
        recurrent form, three key_dim x value_dim products per value head per token
        (S^T k, the rank-one update, S^T q: 6 x heads x dk x dv FLOPs, counted from the
        recurrence, assumed equal for the chunked prefill form)."""
        a = m.attention
        nw = m.layers_of("sliding_window")
        self._win_attn_flops_per_qc = 4.0 * m.n_heads * m.head_dim * nw / tp if nw else 0.0
        self._win_kv_bytes_per_ctx = self.kv_sizes.window_per_token if nw else 0.0
        self._window = float(a.window) if (nw and a is not None and a.window) else 0.0
        self._state_bytes_per_seq = self.kv_sizes.state_per_seq
        nl = m.layers_of("linear")
        if nl and a is not None and a.linear is not None:
            li = a.linear
            self._lin_attn_flops_per_token = (6.0 * li.num_value_heads * li.key_head_dim
                                              * li.value_head_dim * nl / tp)
        else:
            self._lin_attn_flops_per_token = 0.0

    def expert_parallel(self, dp_attention: bool = False, skew=1.0,
                        redundant: int = 0) -> None:
        """Experts split whole over the group's ``tp`` devices (EP size = tp) instead of
        sharded (docs/architecture.md, "Expert parallelism"); called before the first
        pricing. Balanced routing (``skew`` 1) leaves every term as it is: a device reads
        its E/tp experts' share of the touched experts whole, the same bytes as 1/tp of each,
        and the experts' outputs combine in the all-reduce tensor parallelism already pays.
        ``skew`` (routed tokens on the busiest device / the mean: a number, or a table of
        ``SKEW_POINTS`` values at 1, 2, 4, ... tokens, ``routing.skew_table``) prices the
        busiest device, which every step waits for (``pass_rule.moe_load``): its
        routed-expert FLOPs x skew, and the expert slots it touches as if each were skew x
        as likely (S(1 - (1 - skew top_k / S)^T): at most all of them). ``redundant``
        (EPLB's redundant experts): S = E + redundant expert slots per layer, redundant / tp
        more experts' weights resident on each device. ``dp_attention``: each device attends
        its own sequences (attention, dense MLP and shared-expert weights copied on every
        device; KV, MLA's latent included, split by sequence), and each MoE layer dispatches
        and combines tokens by all-to-all (``all_to_all_bytes``, its tokens x skew on the
        busiest device) instead of the all-reduces."""
        if self._params is not None:
            raise RuntimeError("expert_parallel: call before the first pricing")
        m, tp = self.model, self.tp
        if m.moe is None or tp < 2:
            return
        table = np.asarray(skew, dtype=np.float64)
        table = np.full(SKEW_POINTS, float(table)) if table.ndim == 0 else table.copy()
        if table.shape != (SKEW_POINTS,) or not (table >= 1.0).all():
            raise ValueError(f"expert_parallel: skew must be a number or {SKEW_POINTS} "
                             "values, each at least 1")
        self.ep, self.dp_attention = tp, bool(dp_attention)
        self.routing_skew, self.redundant_experts = table, int(redundant)
        w_b = self.prec.weights.bytes_per_element
        if redundant:  # EPLB: replicas of the hottest experts in extra slots on each device
            slots = m.moe.n_experts + int(redundant)
            self._moe_experts, self._moe_miss = float(slots), 1.0 - m.moe.top_k / slots
            self._extra_resident += self.redundant_expert_bytes()
        if (table != 1.0).any():
            self._skew_table = table
            self._moe_routed_flops = 2.0 * m.n_moe_layers * m.moe.top_k * m.expert_params / tp
            self._a2a_skewed = 1.0 if dp_attention else 0.0
        if not dp_attention:
            return
        copied = (m.attn_params + m.n_dense_layers * m.dense_mlp_params
                  + m.n_moe_layers * m.moe_always_params_per_layer)
        self._dense_weight_bytes += copied * w_b * (1.0 - 1.0 / tp)
        self._extra_resident += copied * w_b * (1.0 - 1.0 / tp)
        u = m.kv_sizes(self.prec.kv_cache.bytes_per_element, 1)  # each device: its sequences
        self.kv_sizes = replace(u, full_per_token=u.full_per_token / tp,
                                window_per_token=u.window_per_token / tp,
                                state_per_seq=u.state_per_seq / tp)
        if m.attention is not None:
            self.kv_bytes_per_token = self.kv_sizes.per_token * tp
            self._kv_bytes_per_ctx = self.kv_sizes.full_per_token
            if self._win_kv_bytes_per_ctx:
                self._win_kv_bytes_per_ctx = self.kv_sizes.window_per_token
            self._state_bytes_per_seq = self.kv_sizes.state_per_seq
        link = self.hw.link_bw * self.cal.allreduce_bw_eff
        lat = (self.cal.allreduce_latency_s if self.cal.allreduce_latency_s is not None
               else self.hw.link_latency_s)
        self._a2a_bytes_per_token = (m.n_moe_layers * 2.0 * m.moe.top_k * m.hidden_size
                                     * self.prec.activations.bytes_per_element
                                     * (tp - 1) / (tp * tp))
        node, nic = self.hw.devices_per_node, self.hw.scale_out_bw
        if node and nic and tp > node:  # wider than one NVLink domain: the other nodes'
            # share of the remote destinations goes over each device's NIC, in parallel
            # with the same node's share over NVLink; the slower side sets the time, and
            # each exchange waits for the NIC's latency (the profile's NIC terms,
            # ``allreduce_nic_bw_eff`` / ``allreduce_nic_latency_s``; unset: NVLink's)
            n = devices_per_spanned_node(tp, node)
            nic_eff, lat = nic_terms(self.cal, lat)
            intra, inter = (n - 1) / (tp - 1), (tp - n) / (tp - 1)
            per_byte = max(intra / link, inter / (nic * nic_eff))
            self._comm_per_token = self._a2a_bytes_per_token * per_byte
        else:
            self._comm_per_token = self._a2a_bytes_per_token / link
        self._comm_fixed = 2 * m.n_moe_layers * lat

    def redundant_expert_bytes(self) -> float:
        """Resident bytes of EPLB's redundant experts on each device: redundant / ep more
        experts per MoE layer, n_moe x (redundant / ep) x expert params x weight bytes (0
        without them)."""
        m, n = self.model, self.redundant_experts
        if not n or m.moe is None:
            return 0.0
        return (m.n_moe_layers * (n / self.tp) * m.expert_params
                * self.prec.weights.bytes_per_element)

    def all_to_all_bytes(self, tokens):
        """Bytes each device sends per pass of ``tokens`` tokens under dp_attention: per MoE
        layer, its tokens / ep dispatched to top_k experts and combined back, the share
        (ep - 1) / ep of them remote: n_moe x 2 x (T / ep) x top_k x hidden x act bytes x
        (ep - 1) / ep (0 without dp_attention)."""
        return self._a2a_bytes_per_token * np.asarray(tokens, dtype=float)

    # ------------------------------------------------------------------ memory
    @property
    def weight_bytes_per_device(self) -> float:
        """Resident weights on each device of the group (embeddings included; with
        dp_attention the copied attention, dense MLP and shared-expert weights)."""
        return (self.model.total_params * self.prec.weights.bytes_per_element / self.tp
                + self._extra_resident)

    def experts_touched(self, tokens):
        """Expected distinct experts (expert slots) per MoE layer hit by ``tokens`` routed
        tokens, as many as the busiest device's under routing skew x the group's size
        (``pass_rule.experts_touched`` with ``moe_load``'s miss)."""
        r, p = _rule(), self.pass_params()
        return self._per_pass(tokens, lambda x: r.experts_touched(p[17], r.moe_load(p, x)[1],
                                                                 x))

    def skew(self, tokens):
        """Routed tokens on the busiest expert-parallel device / the mean, for passes of
        ``tokens`` tokens (``pass_rule.routing_skew``: 1 without skew)."""
        r, p = _rule(), self.pass_params()
        return self._per_pass(tokens, lambda x: r.routing_skew(p, x))

    @staticmethod
    def _per_pass(tokens, fn):
        t = np.asarray(tokens, dtype=np.float64)
        out = np.array([fn(float(x)) for x in t.ravel()])
        return out.reshape(t.shape) if t.ndim else float(out[0])

    # ------------------------------------------------------------------ pricing
    def time(self, tokens, qc, ctx, logits=None):
        """Seconds for passes with these aggregates (floats or broadcastable arrays).

        Zero tokens cost zero: no pass is launched.
        """
        total = self.time_and_work(tokens, qc, ctx, logits)[0]
        return total if total.ndim else float(total)

    def pass_params(self) -> np.ndarray:
        """This model's constants as the parameter vector of the one pass rule
        (``pass_rule.PARAMS``), built on first use (a subclass may adjust its attributes in
        its own ``__init__``)."""
        if self._params is None:
            r = _rule()
            self._params = np.array([float(getattr(self, a)) for a in r.PARAMS[:r.SKEW]]
                                    + [float(x) for x in self._skew_table])
            self._params.flags.writeable = False
        return self._params

    def group_times(self, tokens, qc, ctx, logits=None) -> dict[str, np.ndarray]:
        """Seconds of passes per op group, the terms ``time`` adds up (for fitting measured
        per-operator tables, ``calibrate.profiles``): linear, attention, elementwise,
        allreduce, overhead (``pass_rule.pass_parts``: a pass with no tokens costs nothing)."""
        parts = self._evaluate_parts(tokens, qc, ctx, logits)
        return {g: parts[i] for i, g in enumerate(_rule().GROUPS)}

    def _evaluate_parts(self, tokens, qc, ctx, logits, ctxw=None, seqs=None):
        """``pass_rule.pass_parts`` of each pass: a tuple of arrays in ``PARTS``' order."""
        shape, flat = _rule().broadcast(tokens, qc, ctx, logits, ctxw, seqs)
        out = np.empty((len(_rule().PARTS), flat[0].shape[0]))
        _rule().parts_many(self.pass_params(), *flat, out)
        return tuple(x.reshape(shape) for x in out)

    def _evaluate(self, tokens, qc, ctx, logits):
        """The cost model (``pass_rule``, written once): (seconds, compute s, memory s,
        comm s, FLOPs, bytes) per pass."""
        g = self._evaluate_parts(tokens, qc, ctx, logits)
        total = g[0] + g[1] + g[2] + g[3] + g[4]
        return total, g[5], g[6], g[3], g[7], g[8]

    def iteration_overhead(self, seqs, prefills):
        """The engine's CPU work for iterations with ``seqs`` sequences of which ``prefills``
        carry a prompt chunk (scheduler, input preparation, sampling, output handling)."""
        c = self.cal
        return _overheads(0, (c.engine_fixed_s, c.engine_per_seq_s, c.engine_per_prefill_s),
                          seqs, prefills)

    def speculation_overhead(self, rows, drafted):
        """Speculation's own work for steps with ``rows`` decoding sequences that draft
        ``drafted`` tokens in all: proposer launch and rejection sampling once per step,
        bookkeeping per sequence (paid even when a policy drafts nothing, as measured) and
        per drafted token. Only charged where a drafter is configured."""
        c = self.cal
        return _overheads(1, (c.spec_step_overhead_s, c.spec_seq_overhead_s,
                              c.spec_token_overhead_s), rows, drafted)

    def time_and_work(self, tokens, qc, ctx, logits=None, ctxw=None, seqs=None):
        """Seconds, FLOPs and bytes of passes (arrays of aggregates, one pass each; ``ctxw``
        sum_i min(c_i, W) and ``seqs`` the sequences, for window and linear layers)."""
        shape, flat = _rule().broadcast(tokens, qc, ctx, logits, ctxw, seqs)
        out = np.empty((3, flat[0].shape[0]))
        _rule().price_many(self.pass_params(), *flat, out)
        return tuple(x.reshape(shape) for x in out)

    def work(self, tokens, qc, ctx, logits=None):
        """FLOPs and bytes per device of passes with these aggregates (utilisation, energy)."""
        return self.time_and_work(tokens, qc, ctx, logits)[1:]

    def price(self, shape: BatchShape) -> PassCost:
        """Full breakdown of one pass (for reports and tests)."""
        if shape.tokens <= 0:
            return PassCost(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        total, comp, mem, comm, flops, nbytes = (float(x) for x in self._evaluate(
            shape.tokens, shape.qc, shape.ctx, shape.logits))
        return PassCost(
            time_s=total, compute_s=comp, memory_s=mem, comm_s=comm,
            overhead_s=self._overhead, flops=flops, bytes=nbytes,
            compute_util=flops / (total * self.linear_peak),
            memory_util=nbytes / (total * self.hw.hbm_bw),
        )

    def ridge_tokens(self) -> float:
        """Batch tokens where linear layers turn compute-bound (dense weights, short context)."""
        per_tok_c = self._lin_flops_per_token / self._lin_rate
        return max(self._dense_weight_bytes / self._bw / per_tok_c - self._t_half, 0.0)

