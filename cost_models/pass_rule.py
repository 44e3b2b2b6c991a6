"""The price of one forward pass, written once: a scalar rule over a pass's aggregates.

``ForwardCostModel`` (roofline.py) reduces a model, a device group and a calibration to a
parameter vector (``PARAMS``, built by ``ForwardCostModel.pass_params``); ``pass_parts``
prices one pass from it. Every path calls this one rule: the simulator's compiled kernel
(``simulator/execution/kernel_jit.py`` calls ``pass_price`` per step, compiled or as its
Python source), and the roofline's vectorised methods (fits, reports, calibration), which
loop it over arrays here (``price_many``, ``parts_many``, compiled). numba compiles it where
it loads (a core dependency); without it, the same source runs as Python.
"""

from __future__ import annotations

import numpy as np

from specsim.cost_models.routing import SKEW_POINTS

try:
    import numba

    from specsim import numba_cache

    numba_cache.install()  # one cache key for every file of the compiled kernel
    _njit = numba.njit(cache=True, error_model="numpy", nogil=True)
except (ImportError, OSError):  # numba missing or not loading: the functions as written
    def _njit(fn):
        return fn

#: the parameter vector's entries, in order (``ForwardCostModel`` attribute names): linear
#: FLOPs per token and per logit, dense weight bytes, matmul rate, small-matmul half point,
#: attention FLOPs per unit of causal area, KV bytes per context token, attention rate,
#: weight bandwidth, elementwise bytes per token, elementwise and attention-read bandwidth,
#: dequantisation share, all-reduce seconds per token and per pass, fixed floors per pass,
#: MoE: routed-expert bytes of all MoE layers per expert (slot), experts (expert slots) per
#: layer, and the share of them a token misses (1 - top_k / experts).
PARAMS = ("_lin_flops_per_token", "_head_flops_per_logit", "_dense_weight_bytes",
          "_lin_rate", "_t_half", "_attn_flops_per_qc", "_kv_bytes_per_ctx",
          "_attn_rate", "_bw", "_ew_bytes_per_token", "_ew_bw", "_attn_bw", "_dequant",
          "_comm_per_token", "_comm_fixed", "_overhead",
          "_moe_bytes_per_expert", "_moe_experts", "_moe_miss",
          "_win_attn_flops_per_qc", "_win_kv_bytes_per_ctx", "_window",
          "_state_bytes_per_seq", "_lin_attn_flops_per_token",
          "_moe_routed_flops", "_a2a_skewed") + tuple(
              f"_skew_{i}" for i in range(SKEW_POINTS))
#: the layer kinds' entries (``pass_parts_kinds``): sliding-window layers' attention FLOPs
#: per unit of area and KV bytes per context token, the window; linear-attention layers'
#: state bytes per sequence and FLOPs per token (all 0 for a model of gqa/MLA layers only).
#: Expert parallelism's routing skew (``routing_skew``): the routed experts' FLOPs per token
#: per device, whether the per-token communication is the all-to-all (1: dp_attention) and
#: the skew table ``_skew_i``, the busiest device's routed tokens / the mean at 2^i tokens
#: (``ForwardCostModel.pass_params`` writes ``_skew_table`` there; all 0: no skew)
ROUTED, A2A = PARAMS.index("_moe_routed_flops"), PARAMS.index("_a2a_skewed")
SKEW = PARAMS.index("_skew_0")

#: what ``pass_parts`` returns, in order
PARTS = ("linear", "attention", "elementwise", "allreduce", "overhead", "compute", "memory",
         "flops", "bytes")
GROUPS = PARTS[:5]  # the op groups whose sum is the pass time


@_njit
def nanmax(x, y):
    """np.maximum of two floats (NaN wins); the kernel's ``numpy_order.maximum`` too."""
    if x != x:
        return x
    if y != y:
        return y
    return x if x >= y else y


@_njit
def experts_touched(experts, miss, t):
    """Expected distinct experts per MoE layer hit by ``t`` routed tokens (each token picks
    top_k of ``experts`` uniformly: a given expert is missed with probability ``miss`` per
    token)."""
    return experts * (1.0 - miss ** t)


@_njit
def routing_skew(p, t):
    """Routed tokens on the busiest expert-parallel device / the mean, for a pass of ``t``
    tokens: 1 without a skew table (``p[SKEW]`` 0); else the table (its point i at 2^i
    tokens, ``cost_models/routing.py``), linear in tokens between two points, its first
    value below one token and its last beyond the last point."""
    if not p[SKEW] > 0:
        return 1.0
    if not t > 1.0:
        return p[SKEW]
    lo = 1.0
    for i in range(SKEW_POINTS - 1):
        hi = lo * 2.0
        if t < hi:
            a = p[SKEW + i]
            return a + (t - lo) / lo * (p[SKEW + i + 1] - a)
        lo = hi
    return p[SKEW + SKEW_POINTS - 1]


@_njit
def moe_load(p, t):
    """(skew, miss) of the busiest device in a pass of ``t`` tokens: its routed tokens / the
    mean (``routing_skew``) and the chance a token misses a given expert slot of its, each
    ``skew`` x as likely as the mean's to be picked: 1 - min(skew (1 - miss), 1) (the
    uniform ``miss`` itself without a skew table)."""
    if not p[SKEW] > 0:
        return 1.0, p[18]
    s = routing_skew(p, t)
    hit = s * (1.0 - p[18])
    return s, 1.0 - (hit if hit < 1.0 else 1.0)


@_njit
def pass_parts(p, t, qc, ctx, lg):
    """``pass_parts_kinds`` where the caller has no per-sequence aggregates: the window's
    KV read capped at ``lg`` sequences x the window, ``lg`` sequences (exact for plain decode,
    where every sequence has one logit and no context below the window)."""
    return pass_parts_kinds(p, t, qc, ctx, lg, ctx, lg)


@_njit
def pass_parts_kinds(p, t, qc, ctx, lg, ctxw, nseq):
    """One pass of ``t`` tokens (causal attention area ``qc``, cached context ``ctx``,
    ``lg`` logits): seconds per op group (linear, attention, elementwise, all-reduce, fixed
    floors), compute and memory seconds, FLOPs and bytes per device.

    Per group max(FLOPs / rate, bytes / bandwidth): linear layers (dequantisation on the
    compute side, efficiency T / (T + T_half) for small matmuls, the routed experts the
    tokens touch: on the busiest device under skewed expert parallelism, ``moe_load``),
    attention (the causal area's FLOPs vs the KV read); elementwise at its
    bandwidth; all-reduce per token plus latency; fixed floors. A pass with no tokens is not
    launched and costs nothing.

    Layer kinds (docs/architecture.md, "Layer kinds"): sliding-window layers read
    sum_i min(c_i, W) cached keys (``ctxw``, capped again at ``nseq`` x W) plus the new
    tokens, and their FLOPs cover at most W keys per query (min(qc, t x W): exact for one
    sequence, an upper bound for a batch mixing contexts below and above W); linear layers
    read each of ``nseq`` sequences' state once and write one state per logit token (a
    verify of k + 1 tokens keeps k + 1 intermediate states, as vLLM's GDN backend does, so
    the accepted one is the next step's start), FLOPs linear in tokens."""
    if not t > 0:
        return 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    lin_fpt, head_fpl, wbytes, lin_rate, t_half = p[0], p[1], p[2], p[3], p[4]
    attn_fpqc, kv_bpc, attn_rate, bw, ew_bpt = p[5], p[6], p[7], p[8], p[9]
    ew_bw, attn_bw, dequant, comm_pt, comm_fixed, overhead = (p[10], p[11], p[12], p[13],
                                                              p[14], p[15])
    if p[17] > 0:  # routed experts: the weights of the experts these tokens touch (on the
        # busiest device under skewed expert parallelism: its routed FLOPs x skew, the
        # all-to-all's tokens x skew, its expert slots as if each skew x as likely)
        s, miss = moe_load(p, t)
        if p[SKEW] > 0:
            lin_fpt = lin_fpt + (s - 1.0) * p[ROUTED]
            if p[A2A] > 0:
                comm_pt = comm_pt * s
        wbytes = wbytes + p[16] * experts_touched(p[17], miss, t)
    c_lin = (lin_fpt * t + head_fpl * lg) / lin_rate
    if t_half > 0:  # small matmuls: efficiency T / (T + T_half) of the maximum
        c_lin = c_lin * (1.0 + t_half / nanmax(t, 1.0))
    m_lin = wbytes / bw
    c_att = (attn_fpqc * qc) / attn_rate
    m_att = (kv_bpc * (ctx + t)) / attn_bw
    if p[20] > 0:  # sliding-window layers: keys capped at the window
        wmax = nseq * p[21]
        cw = ctxw if ctxw < wmax else wmax
        qw = qc if qc < t * p[21] else t * p[21]
        c_att = c_att + (p[19] * qw) / attn_rate
        m_att = m_att + (p[20] * (cw + t)) / attn_bw
    if p[22] > 0:  # linear layers: state read per sequence, written per logit token
        c_att = c_att + (p[23] * t) / attn_rate
        m_att = m_att + (p[22] * (nseq + lg)) / attn_bw
    ew = ew_bpt * t / ew_bw
    c_lin_q = c_lin * (1.0 + dequant)
    linear = nanmax(c_lin_q, m_lin)
    attention = nanmax(c_att, m_att)
    comm = comm_pt * t + comm_fixed
    flops = lin_fpt * t + head_fpl * lg + c_att * attn_rate
    nbytes = m_lin * bw + m_att * attn_bw + ew * ew_bw
    return (linear, attention, ew, comm, overhead, c_lin_q + c_att, m_lin + m_att + ew,
            flops, nbytes)


@_njit
def pass_price(p, t, qc, ctx, lg):
    """One pass: (seconds, FLOPs, bytes), the sum of ``pass_parts``' groups."""
    g = pass_parts(p, t, qc, ctx, lg)
    return g[0] + g[1] + g[2] + g[3] + g[4], g[7], g[8]


@_njit
def pass_price_kinds(p, t, qc, ctx, lg, ctxw, nseq):
    """``pass_price`` with the layer kinds' aggregates (``pass_parts_kinds``)."""
    g = pass_parts_kinds(p, t, qc, ctx, lg, ctxw, nseq)
    return g[0] + g[1] + g[2] + g[3] + g[4], g[7], g[8]


@_njit
def price_many(p, t, qc, ctx, lg, ctxw, nseq, out):
    """``pass_price_kinds`` of passes i (flat arrays) into out[0:3, i]."""
    for i in range(t.shape[0]):
        out[0, i], out[1, i], out[2, i] = pass_price_kinds(p, t[i], qc[i], ctx[i], lg[i],
                                                           ctxw[i], nseq[i])


@_njit
def parts_many(p, t, qc, ctx, lg, ctxw, nseq, out):
    """``pass_parts_kinds`` of passes i (flat arrays) into out[0:9, i] (``PARTS``' order)."""
    for i in range(t.shape[0]):
        g = pass_parts_kinds(p, t[i], qc[i], ctx[i], lg[i], ctxw[i], nseq[i])
        for j in range(9):
            out[j, i] = g[j]


@_njit
def engine_overhead(fixed, per_seq, per_prefill, seqs, prefills):
    """The engine's CPU work for one iteration of ``seqs`` sequences of which ``prefills``
    carry a prompt chunk (scheduler, input preparation, sampling, output handling); an
    iteration with no sequence is not run. Written once: the kernel's step price
    (``kernel_jit._combine``) and ``ForwardCostModel.iteration_overhead``."""
    if seqs > 0:
        return (fixed + per_seq * seqs) + per_prefill * prefills
    return 0.0


@_njit
def spec_overhead(per_step, per_seq, per_token, rows, drafted):
    """Speculation's own work for one step of ``rows`` decoding sequences drafting
    ``drafted`` tokens in all: once per step, per sequence (paid even when a policy drafts
    nothing, as measured), per drafted token; nothing on a step with no decoding row.
    Written once: ``kernel_jit._combine`` and ``ForwardCostModel.speculation_overhead``."""
    if rows > 0:
        return (per_step + per_seq * rows) + per_token * drafted
    return 0.0


@_njit
def overheads_many(kind, c0, c1, c2, a, b, out):
    """``engine_overhead`` (kind 0) or ``spec_overhead`` (kind 1) of iterations i (flat
    float arrays ``a``, ``b``) into out[i]."""
    for i in range(a.shape[0]):
        if kind == 0:
            out[i] = engine_overhead(c0, c1, c2, a[i], b[i])
        else:
            out[i] = spec_overhead(c0, c1, c2, a[i], b[i])


def broadcast(tokens, qc, ctx, logits, ctxw=None, seqs=None
              ) -> tuple[tuple[int, ...], list[np.ndarray]]:
    """Aggregates as flat float arrays of one common shape (logits default to tokens; the
    window's sum_i min(c_i, W) to ctx, capped in the rule; sequences to logits)."""
    t = np.asarray(tokens, dtype=np.float64)
    lg = t if logits is None else logits
    arrs = np.broadcast_arrays(t, np.asarray(qc, dtype=np.float64),
                               np.asarray(ctx, dtype=np.float64),
                               np.asarray(lg, dtype=np.float64),
                               np.asarray(ctx if ctxw is None else ctxw, dtype=np.float64),
                               np.asarray(lg if seqs is None else seqs, dtype=np.float64))
    return arrs[0].shape, [np.ascontiguousarray(a).ravel() for a in arrs]
