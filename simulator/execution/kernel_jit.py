"""The iteration kernel's rules, written once: plan, price, shape step 0 and commit a
segment as plain loops over its (steps x rows), which numba compiles.

``kernel.Kernel`` binds these to a worker (what each call reads and writes, and the Python
hooks of plug-ins). Every run goes through these functions, compiled or not:

- compiled (``simulation.compiled: auto`` or ``true``, numba installed): the functions
  below, compiled once per machine and cached on disk (``cache=True``; the first run
  compiles for about a minute, later runs load the cache in a fraction of a second);
- pure Python (``simulation.compiled: false``, numba missing, or a plug-in acceptance
  model whose sampler must run inside ``_plan``'s loop): the same functions' Python
  source (numba's ``py_func``, ``numpy_order.pure``), so the same float operations in the
  same order and the same bits, only slower (``functions(False)``).

What is here: keyed uniforms (SplitMix64, ``simulator/rng.py``, compiled as written there),
acceptance draws (the survival-curve sampler), the emit / KV-block arithmetic and prefill
chunks of a segment (``_plan``, ``_chunk_rows``), pricing (``_evaluate``: the one pass
rule, ``cost_models.pass_rule.pass_price``, that the roofline loops too; ``_price``: the
executor's overheads and
every bundled drafter's cost, a drafter being a kind and its parameters, ``drafter_data``),
the fcfs scheduler's step 0 (``_shape``: ``FcfsScheduler.shape`` calls it, and the fused
path with a static k), and committing (``_commit``: the
request table's columns, the KV pool's held blocks, the ITL gaps, the accepted-length
histogram, the iteration log's columns by name, and the ledger's accounting ``_account``).

The sums reproduce numpy's pairwise order (``numpy_order.total``) where the bits of the
earlier numpy kernel must be kept; the other sums add integer-valued floats (token counts,
attention areas), exact in any order. Pricing is left to the Python executor (the pricing
hook, ``Kernel._price_hook``) for drafters per class, and a drafter, cost model or
executor defined outside specsim.
"""

from __future__ import annotations

from types import FunctionType, SimpleNamespace

import numpy as np

from specsim.cost_models import pass_rule
from specsim.cost_models.roofline import ForwardCostModel
from specsim.simulator import rng
from specsim.simulator.execution.numpy_order import jit, pure
from specsim.simulator.execution.numpy_order import maximum as _maximum
from specsim.simulator.execution.numpy_order import minimum as _minimum
from specsim.simulator.execution.numpy_order import total as _sum
from specsim.simulator.metrics.iteration_log import ITER

# ------------------------------------------------------------------ keyed uniforms

# rng.py's SplitMix64, compiled as written there (``draw`` calling the compiled ``mix``)
_mix = jit(rng.mix)
_draw = jit(FunctionType(rng.draw.__code__, {**vars(rng), "mix": _mix}, "draw"))


@jit
def _uniform(key, step):
    """``rng.uniform`` for one (key, step): U(0, 1], the same bits."""
    return _draw(key, np.uint64(step))


# ------------------------------------------------------------------ the roofline

# the one pass rule (cost_models/pass_rule.py), compiled there; its Python source under
# ``pure`` like every kernel function: (seconds, FLOPs, bytes) of one pass
_evaluate = pass_rule.pass_price
_evaluate_kinds = pass_rule.pass_price_kinds  # with the window's and linear layers' sums
_engine_oh = pass_rule.engine_overhead  # the engine's CPU work per iteration
_spec_oh = pass_rule.spec_overhead  # speculation's own work per step


# drafter kinds (``_draft``), by the name a built-in drafter declares (``Drafter.kind``)
D_NONE, D_SEQ, D_PAR, D_MEDUSA, D_LOOKUP, D_RATIO, D_FIXED = range(7)
DRAFTER_KINDS = {"none": D_NONE, "sequential": D_SEQ, "parallel": D_PAR,
                 "medusa": D_MEDUSA, "lookup": D_LOOKUP, "ratio": D_RATIO,
                 "fixed": D_FIXED}


@jit
def _draft(S, B, k, ctx, pf_tokens, pf_qc, dkind, dp, dprefills, pass_rows, scal, dtt, dtf,
           dtb):
    """A drafter's cost per step of a (steps x rows) plan, into dtt, dtf, dtb (seconds,
    FLOPs, bytes; left as given, zeros, where it does not draft): every built-in drafter,
    written once, as a kind (``dkind``, ``DRAFTER_KINDS``) and its data: ``dp`` the
    parameter vector of the roofline its passes run on, ``scal`` its scalar (CPU seconds
    per lookup, the ratio, or seconds per drafted token), ``dprefills`` whether its first
    pass takes the step's new prompt tokens (its own KV), ``pass_rows`` a tree's rows per
    pass. ``_price`` calls it compiled; ``draft_cost`` is its Python entry (a drafter's
    ``cost_steps``, the per-class drafter, reports)."""
    if dkind == D_SEQ:
        kmax = 0
        for s in range(S):
            for i in range(B):
                if k[s, i] > kmax:
                    kmax = k[s, i]
        if dprefills:
            for s in range(S):
                if pf_tokens[s] != 0:
                    kmax = max(kmax, 1)
                    break
        if kmax > 0:
            cnt = np.zeros(kmax + 1, np.int64)
            cs = np.zeros(kmax + 1)
            tt = np.empty(kmax)
            ff = np.empty(kmax)
            bb = np.empty(kmax)
            tree = False
            for j in range(min(kmax, len(pass_rows))):
                if pass_rows[j] != 1:
                    tree = True
            for s in range(S):
                cnt[:] = 0
                cs[:] = 0.0
                for i in range(B):
                    v = min(k[s, i], kmax)
                    cnt[v] += 1
                    cs[v] += ctx[s, i]
                nn = 0
                cc = 0.0
                for j in range(kmax - 1, -1, -1):  # rows drafting more than j tokens
                    nn += cnt[j + 1]
                    cc += cs[j + 1]
                    n = np.float64(nn)
                    c = cc + j * n  # pass j reads ctx + j
                    if tree:
                        r = np.float64(pass_rows[j]) if j < len(pass_rows) else 1.0
                        n = n * r
                        c = c * r
                    tok = n
                    q = c + n  # one token per row, attending ctx + j + 1
                    if j == 0 and dprefills:
                        tok = tok + pf_tokens[s]
                        q = q + pf_qc[s]
                    tt[j], ff[j], bb[j] = _evaluate(dp, tok, q, c, n)
                dtt[s] = _sum(tt, 0, kmax)
                dtf[s] = _sum(ff, 0, kmax)
                dtb[s] = _sum(bb, 0, kmax)
    elif dkind == D_PAR:
        for s in range(S):
            drafted = 0.0
            area = 0.0
            c = 0.0
            for i in range(B):
                kk = np.float64(k[s, i])
                drafted += kk
                area += kk * ctx[s, i] + kk * (kk + 1) / 2
                if k[s, i] > 0:
                    c += ctx[s, i]
            pt = pf_tokens[s] if dprefills else 0.0
            pq = pf_qc[s] if dprefills else 0.0
            dtt[s], dtf[s], dtb[s] = _evaluate(dp, drafted + pt, area + pq, c, drafted)
    elif dkind == D_MEDUSA:
        for s in range(S):
            rows = 0
            for i in range(B):
                if k[s, i] > 0:
                    rows += 1
            n = np.float64(rows)
            dtt[s], dtf[s], dtb[s] = _evaluate(dp, n, 0.0, 0.0, n)
    elif dkind == D_LOOKUP:
        for s in range(S):
            for i in range(B):
                if k[s, i] > 0:
                    dtt[s] = scal
                    break
    elif dkind == D_RATIO:
        for s in range(S):
            rows = 0
            c = 0.0
            km = 0
            for i in range(B):
                if k[s, i] > 0:
                    rows += 1
                    c += ctx[s, i]
                if i == 0 or k[s, i] > km:
                    km = k[s, i]
            if rows > 0:
                n = np.float64(rows)
                step = _evaluate(dp, n, c + n, c, n)[0]
                dtt[s] = scal * km * step
    elif dkind == D_FIXED:
        for s in range(S):
            km = 0
            for i in range(B):
                if i == 0 or k[s, i] > km:
                    km = k[s, i]
            dtt[s] = scal * np.float64(km)


@jit
def _price(S, B, k, ctx, tokens, qc, csum, logits, pf_tokens, pf_qc, seqs, chunks,
           tp, cal, speculating, overlap, dkind, dp, dprefills, pass_rows, scal, out):
    """``Executor.price`` over a plan, into out[0:7]: per step (seconds, draft s, verify s,
    FLOPs, bytes, draft FLOPs, draft bytes). ``cal``: engine fixed / per seq / per prefill
    and speculation per step / per seq / per token overheads; ``scal``: the drafter's own
    scalar (CPU s per lookup, ratio, or seconds per token). The target's pass is the one
    pass rule's, its MoE term included (under expert parallelism with routing skew, the
    busiest device's by the step's tokens: ``pass_rule.moe_load``)."""
    vt = out[2]
    flops = out[3]
    nbytes = out[4]
    out[1][:] = 0.0
    out[5][:] = 0.0
    out[6][:] = 0.0
    for s in range(S):  # the layer kinds' aggregates: sum_i min(c_i, W), the sequences
        cw = csum[s]
        if tp[21] > 0:
            cw = _sum(np.minimum(ctx[s], tp[21]), 0, B)
        vt[s], flops[s], nbytes[s] = _evaluate_kinds(tp, tokens[s], qc[s], csum[s], logits[s],
                                                     cw, np.float64(seqs[s]))
    # the drafter's passes (prefill tokens reach it only if it keeps its own KV)
    _draft(S, B, k, ctx, pf_tokens, pf_qc, dkind, dp, dprefills, pass_rows, scal, out[1],
           out[5], out[6])
    _combine(S, B, k, seqs, chunks, cal, speculating, overlap, out[0], out[0], False, out)


@jit
def _combine(S, B, k, seqs, chunks, cal, speculating, overlap, spec_oh, iter_oh, given, out):
    """An iteration's seconds from its parts, in out (``_price``'s rows): the draft phase
    (out[1]) plus speculation's own work where a drafter is configured (per step, per
    decoding row, per drafted token), serial with the target's pass (out[2]) unless the
    engine overlaps them, plus the engine's CPU work for the batch; the draft phase's
    FLOPs and bytes (out[5:7]) join the target's (out[3:5]). The overheads are ``cal``'s,
    or (``given``) a plug-in cost model's own, per step (``spec_oh``, ``iter_oh``)."""
    dt = out[0]
    dtt = out[1]
    vt = out[2]
    for s in range(S):
        if speculating:
            rows = seqs[s] - chunks[s]
            if given:
                dtt[s] = dtt[s] + spec_oh[s]
            else:
                drafted = 0
                for i in range(B):
                    drafted += k[s, i]
                dtt[s] = dtt[s] + _spec_oh(cal[3], cal[4], cal[5], np.float64(rows),
                                           np.float64(drafted))
        d = _maximum(dtt[s], vt[s]) if overlap else dtt[s] + vt[s]
        sq = np.float64(seqs[s])
        if given:
            dt[s] = d + iter_oh[s]
        else:
            dt[s] = d + _engine_oh(cal[0], cal[1], cal[2], sq, np.float64(chunks[s]))
        out[3][s] = out[3][s] + out[5][s]
        out[4][s] = out[4][s] + out[6][s]


# ------------------------------------------------------------------ planning


@jit
def _width(k, widths, use_tree):
    """``dr.Drafter.verify_width`` of one draft length."""
    return widths[min(k, len(widths) - 1)] if use_tree else k + 1


@jit
def _k_for_width(w, widths, use_tree):
    """``Drafter.k_for_width``: the deepest draft whose verification fits in ``w`` tokens
    (a tree's widths increase with depth)."""
    if not use_tree:
        return max(w - 1, 0)
    n = 0
    for j in range(len(widths)):
        if widths[j] <= w:
            n += 1
    return max(n - 1, 0)


@jit
def _plan(rows, k0, chunk, pre0, done0, S, K, has_pre,
          generated, output, tsteps, match_key, accept_key, cls_idx, alpha_scale, kv_len,
          blocks, shared, use_shared, kv_total, kv_limit, kv_kept, use_kept,
          alpha_table, proposes_always, match_rate, widths, use_tree, bs,
          chunking, budget, ptarget, hands_off, row_alpha, use_rows, accepted_hook):
    """``Kernel.plan`` up to pricing: the (S, B) arrays and the per-step aggregates, packed
    so that few arrays cross back into Python (each costs a microsecond or so):
    Ia = (k, acc, emit, kv_add, after_rows); Bo = alive (S rows), finishing (S rows),
    count0, first0, then (a segment through prefill chunks, ``chunking``) prefilling,
    first-token and counted (S rows each); Iv = (during, seqs, spec_free,
    spec_alloc); Fa = (tokens, qc, csum, logits, pf_tokens, pf_qc,
    chunks); ctx (S, B). ``chunking``: rows whose prompt goes on after step 0 get
    ``budget`` less the decode rows' tokens per step, as ``Kernel._chunk_steps``."""
    B = len(rows)
    gen0 = np.empty(B, np.int64)
    left0 = np.empty(B, np.int64)
    for i in range(B):
        gen0[i] = generated[rows[i]]
        left0[i] = output[rows[i]] - gen0[i]
    if S > 1:
        lmax = left0[0]
        for i in range(1, B):
            lmax = max(lmax, left0[i])
        S = max(min(S, lmax + 1), 1)
    Ia = np.empty((5, S, B), np.int64)
    Bo = np.zeros((5 * S + 2, B), np.bool_)
    Iv = np.zeros((4, S), np.int64)
    Fa = np.zeros((7, S))
    k, acc, emit, kv_add, after_rows = Ia[0], Ia[1], Ia[2], Ia[3], Ia[4]
    alive, finishing, count0, first0 = Bo[:S], Bo[S:2 * S], Bo[2 * S], Bo[2 * S + 1]
    during, seqs = Iv[0], Iv[1]
    tokens, qc, csum, logits, pf_tokens, pf_qc, chunks = (Fa[0], Fa[1], Fa[2], Fa[3], Fa[4],
                                                          Fa[5], Fa[6])
    for i in range(B):
        count0[i] = (not pre0[i]) or (done0[i] and gen0[i] > 0)
    cont = np.zeros(B, np.bool_)  # prompts left in chunks after step 0
    any_cont = False
    if chunking and S > 1:
        for i in range(B):
            if pre0[i] and not done0[i]:
                cont[i] = True
                any_cont = True
    # draft lengths and draws, keyed by (request, target step)
    kfull = np.empty((S, B), np.int64)
    sidx = np.empty((S, B), np.int64)
    for i in range(B):
        s0 = tsteps[rows[i]]
        kfull[0, i] = k0[i]
        sidx[0, i] = s0
        base = s0 + (1 if count0[i] else 0)
        for s in range(1, S):
            sidx[s, i] = base + (s - 1)
            kfull[s, i] = K
            if not proposes_always and K > 0:
                um = _uniform(match_key[rows[i]], sidx[s, i])
                kfull[s, i] = K if um <= match_rate else 0
            if cont[i]:
                kfull[s, i] = 0  # a prefilling row drafts nothing
    kmax = 0
    for s in range(S):
        for i in range(B):
            if kfull[s, i] > kmax:
                kmax = kfull[s, i]
    afull = np.zeros((S, B), np.int64)
    if kmax > 0:
        # each row's conditional alphas: its class's, times its request's scale (capped at
        # 1), or given per row (``use_rows``: drafters per class, ``row_alpha``)
        jmax = min(kmax, row_alpha.shape[1] if use_rows else alpha_table.shape[1])
        cond = np.empty((B, jmax))
        for i in range(B):
            r = rows[i]
            for j in range(jmax):
                cond[i, j] = (row_alpha[i, j] if use_rows else
                              _minimum(alpha_table[cls_idx[r], j] * alpha_scale[r], 1.0))
        if accepted_hook is not None:  # a plug-in acceptance model (pure-Python kernel only)
            u = np.empty((S, B))
            for i in range(B):
                for s in range(S):
                    u[s, i] = _uniform(accept_key[rows[i]], sidx[s, i])
            afull[:, :] = accepted_hook(u, cond, kfull)
        else:  # the survival-curve sampler (AcceptanceModel.accepted)
            surv = np.empty(jmax)
            for i in range(B):
                p = 1.0
                for j in range(jmax):
                    p = cond[i, j] if j == 0 else p * cond[i, j]
                    surv[j] = p
                key = accept_key[rows[i]]
                for s in range(S):
                    u = _uniform(key, sidx[s, i])
                    n = 0
                    for j in range(jmax):
                        if u <= surv[j]:
                            n += 1
                    afull[s, i] = min(n, kfull[s, i])
    q = np.empty((S, B), np.int64)
    during_rows = np.empty((S, B), np.int64)
    ctx = np.empty((S, B))
    for i in range(B):
        if cont[i]:
            continue  # below, once the decode rows' tokens per step are known
        r = rows[i]
        before = 0  # tokens emitted in earlier steps (uncapped)
        kvb = kv_len[r]  # KV tokens before the step
        sh = shared[r] if use_shared else 0
        for s in range(S):
            e = afull[s, i] + 1
            if s == 0 and has_pre and pre0[i]:
                e = 1 if done0[i] else 0
            left = left0[i] - min(before, left0[i])
            before += e
            al = left > 0
            kk = min(kfull[s, i], max(left - 1, 0))
            a = min(afull[s, i], kk)
            em = a + 1 if al else 0
            if s == 0 and has_pre and pre0[i]:
                em = 1 if done0[i] else 0
            if al:
                qq = _width(kk, widths, use_tree)
            else:
                qq = 0
            ka = em
            if s == 0 and has_pre and pre0[i]:
                qq = chunk[i]
                ka = chunk[i]
            k[s, i] = kk
            acc[s, i] = a
            emit[s, i] = em
            q[s, i] = qq
            kv_add[s, i] = ka
            alive[s, i] = al
            fin = al and left == em
            finishing[s, i] = fin
            kvp = kvb - sh
            need = -(-(kvp + qq) // bs)
            if s == 0:
                held = blocks[r]
            else:
                held = -(-kvp // bs)
                if s == 1 and has_pre and pre0[i]:  # a prefill keeps its reserve
                    held = max(blocks[r], -(-(kv_len[r] - sh + chunk[i]) // bs))
            dr = max(held, need) if al else 0
            ar = min(dr, -(-(kvp + ka) // bs))
            if s == 0 and has_pre and pre0[i]:
                ar = dr
            if fin:
                ar = 0
            during_rows[s, i] = dr
            after_rows[s, i] = ar
            if al and not fin and kk > 0 and not (s == 0 and has_pre and pre0[i]):  # drafts:
                Iv[2, s] += max(dr - max(ar, held), 0)  # rejected drafts' blocks, returned
                Iv[3, s] += dr - held  # blocks taken for its draft + bonus tokens
            ctx[s, i] = np.float64(kvb) if al else 0.0
            kvb += ka
    pre = Bo[2 * S + 2:3 * S + 2]
    last = S - 1
    if any_cont:
        last = _chunk_rows(rows, chunk, pre0, done0, S, budget, ptarget, kv_len, blocks,
                           shared, use_shared, bs, cont, gen0, left0, q, Ia, Bo,
                           during_rows, ctx)
    ok = np.empty(S, np.bool_)
    kept = 0
    for s in range(S):
        n_alive = 0
        fin_held = 0
        for i in range(B):
            if alive[s, i]:
                n_alive += 1
            during[s] += during_rows[s, i]
            if finishing[s, i]:
                fin_held += during_rows[s, i]
            qf = np.float64(q[s, i])
            area = qf * ctx[s, i] + qf * (qf + 1) / 2
            tokens[s] += qf
            qc[s] += area
            csum[s] += ctx[s, i]
            if q[s, i] > 0:
                seqs[s] += 1
            if any_cont:
                if pre[s, i]:
                    pf_tokens[s] += qf
                    pf_qc[s] += area
                    if q[s, i] > 0:
                        chunks[s] += 1.0
            elif s == 0 and has_pre and pre0[i]:
                pf_tokens[0] += qf
                pf_qc[0] += area
                if q[0, i] > 0:
                    chunks[0] += 1.0
        good = n_alive > 0  # once every row is done the worker idles
        if s > 0:
            if not use_shared:
                good = good and during[s] <= kv_total
            else:
                good = good and during[s] <= kv_limit
                if use_kept:
                    good = good and during[s] + kept <= kv_kept
        kept += fin_held
        ok[s] = good
        logits[s] = tokens[s]
    if any_cont:  # tokens - prompt tokens + the prompts completing (as Kernel.plan)
        for s in range(S):
            nd = 0
            for i in range(B):
                if pre[s, i] and emit[s, i] > 0:
                    nd += 1
            logits[s] = tokens[s] - pf_tokens[s] + np.float64(nd)
    elif has_pre:
        nd = 0
        for i in range(B):
            if done0[i] and pre0[i]:
                nd += 1
        logits[0] = tokens[0] - pf_tokens[0] + np.float64(nd)
    for i in range(B):
        first0[i] = pre0[i] and done0[i] and gen0[i] == 0
    m = S
    for s in range(S):
        if not ok[s]:
            m = s
            break
    if any_cont:
        m = min(m, last + 1)
        if hands_off:  # finished rows move on (PD prefill pool)
            for s in range(m):
                fin_any = False
                for i in range(B):
                    if finishing[s, i]:
                        fin_any = True
                if fin_any:
                    m = s + 1
                    break
    return S, max(m, 1), Ia, Bo, Iv, ctx, Fa


@jit
def _chunk_rows(rows, chunk, pre0, done0, S, budget, ptarget, kv_len, blocks, shared,
                use_shared, bs, cont, gen0, left0, q, Ia, Bo, during_rows, ctx):
    """``Kernel._chunk_steps`` and the chunking rows' part of ``Kernel.plan``: their chunks
    from each step's budget less the decode rows' tokens (``q``, already filled), the first
    such row taking all until its prompt completes in step ``last`` (returned), the others
    sharing what it leaves there; then their (S, B) entries and the prefilling, first-token
    and counted masks (Bo rows 2S+2..5S+2) for every row."""
    B = len(rows)
    k, acc, emit, kv_add, after_rows = Ia[0], Ia[1], Ia[2], Ia[3], Ia[4]
    alive, finishing = Bo[:S], Bo[S:2 * S]
    pre, firsts, counted = Bo[2 * S + 2:3 * S + 2], Bo[3 * S + 2:4 * S + 2], Bo[4 * S + 2:]
    room = np.zeros(S, np.int64)  # room[s]: budget left to prompts in step s (s >= 1)
    for s in range(1, S):
        used = 0
        for i in range(B):
            if not cont[i]:
                used += q[s, i]
        room[s] = max(budget - used, 0)
    ch = np.zeros((S, B), np.int64)
    comp = np.zeros((S, B), np.bool_)
    first = -1
    for i in range(B):
        if cont[i]:
            first = i
            break
    rem = np.zeros(B, np.int64)
    for i in range(B):
        if cont[i]:
            rem[i] = ptarget[rows[i]] - kv_len[rows[i]] - chunk[i]
    cum = 0
    last = S - 1
    done = False
    for s in range(1, S):
        if cum + room[s] >= rem[first]:  # the first prompt completes in step s
            last = s
            done = True
            break
        cum += room[s]
        ch[s, first] = room[s]
    if done:
        rem[first] -= cum
        ch[last, first] = rem[first]
        left = room[last] - rem[first]
        before = 0
        for i in range(B):
            if cont[i] and i != first:
                ch[last, i] = min(max(left - before, 0), rem[i])
                before += rem[i]
        for i in range(B):
            if cont[i]:
                comp[last, i] = ch[last, i] >= rem[i]
    for i in range(B):
        pre[0, i] = pre0[i]
        comp[0, i] = pre0[i] and done0[i]
        if cont[i]:
            for s in range(1, last + 1):
                pre[s, i] = True
    for i in range(B):
        if not cont[i]:
            continue
        r = rows[i]
        sh = shared[r] if use_shared else 0
        kvb = kv_len[r]
        held = blocks[r]
        for s in range(S):
            if s > last:  # past the segment's end (m <= last + 1): nothing
                k[s, i] = 0
                acc[s, i] = 0
                emit[s, i] = 0
                q[s, i] = 0
                kv_add[s, i] = 0
                alive[s, i] = False
                finishing[s, i] = False
                during_rows[s, i] = 0
                after_rows[s, i] = 0
                ctx[s, i] = 0.0
                continue
            qq = chunk[i] if s == 0 else ch[s, i]
            em = 1 if comp[s, i] else 0
            k[s, i] = 0
            acc[s, i] = 0
            emit[s, i] = em
            q[s, i] = qq
            kv_add[s, i] = qq
            alive[s, i] = True  # left0 >= 1 and nothing emitted before its completion
            fin = em == 1 and left0[i] == 1
            finishing[s, i] = fin
            need = -(-(kvb - sh + qq) // bs)
            dr = max(held, need)  # a prefill keeps its reserve through its chunks
            during_rows[s, i] = dr
            after_rows[s, i] = 0 if fin else dr
            held = dr
            ctx[s, i] = np.float64(kvb)
            kvb += qq
    for s in range(S):
        for i in range(B):
            done_si = pre[s, i] and comp[s, i]
            firsts[s, i] = done_si and gen0[i] == 0
            counted[s, i] = alive[s, i] and ((not pre[s, i]) or (done_si and gen0[i] > 0))
    return last


#: rows of the float pack ``_plan_priced`` returns
F_DT, F_DRAFT, F_VERIFY, F_FLOPS, F_BYTES, F_DFLOPS, F_DBYTES, F_TOKENS, F_PF, F_START, F_END = (
    range(11))


@jit
def _plan_priced(rows, k0, chunk, pre0, done0, S, K, has_pre,
                 generated, output, tsteps, match_key, accept_key, cls_idx, alpha_scale,
                 kv_len, blocks, shared, use_shared, kv_total, kv_limit, kv_kept, use_kept,
                 alpha_table, proposes_always, match_rate, widths, use_tree, bs,
                 chunking, budget, ptarget, hands_off, row_alpha, use_rows, now,
                 tp, cal, speculating, overlap, dkind, dp, dprefills, pass_rows, scal):
    """``_plan``, priced (``_price``) and timed: (S, m, Ia, Bo, Iv, F) with F's rows F_*."""
    S, m, Ia, Bo, Iv, ctx, Fa = _plan(
        rows, k0, chunk, pre0, done0, S, K, has_pre, generated, output, tsteps, match_key,
        accept_key, cls_idx, alpha_scale, kv_len, blocks, shared, use_shared, kv_total,
        kv_limit, kv_kept, use_kept, alpha_table, proposes_always, match_rate, widths,
        use_tree, bs, chunking, budget, ptarget, hands_off, row_alpha, use_rows, None)
    F = np.empty((11, S))
    _price(S, len(rows), Ia[0], ctx, Fa[0], Fa[1], Fa[2], Fa[3], Fa[4], Fa[5], Iv[1], Fa[6],
           tp, cal, speculating, overlap, dkind, dp, dprefills, pass_rows, scal, F)
    F[F_TOKENS] = Fa[0]
    F[F_PF] = Fa[4]
    _times(now, F[F_DT], F[F_START], F[F_END])
    return S, m, Ia, Bo, Iv, F


@jit
def _times(now, dt, start, end):
    """end = now + cumsum(dt), start = end - dt."""
    c = 0.0
    for s in range(len(dt)):
        c = dt[s] if s == 0 else c + dt[s]
        end[s] = now + c
        start[s] = end[s] - dt[s]


# ------------------------------------------------------------------ shaping step 0


@jit
def _shape(run, kv_len, ptarget, output, generated, tsteps, match_key, blocks, K,
           proposes_always, match_rate, widths, use_tree, budget, chunked, kv_free, bs,
           kpol, use_kpol, mprob, use_mprob, kfw, shared, use_shared):
    """The fcfs step 0 (``FcfsScheduler.shape`` calls it; ``_shape_plan_priced`` fuses it
    with the plan): (fits, k, chunk, prefilling, completes, uniform, chunking, grow).

    Decode rows draft the policy's k (``K``, or per decode row ``kpol`` where the policy or
    drafters per class choose), capped so no step overshoots the output; a lookup drafts
    only on a match (chance ``match_rate``, or per decode row ``mprob``); drafts shrink to
    ``kfw`` (the drafter's ``k_for_width`` of the budget per decode row; -1: from the
    widths) when their verification overflows the budget; prefill rows get chunks of what
    is left, in admission order. ``grow``: the KV blocks this step's writes need (a row's
    shared prefix pages, ``shared``, are not its own); ``fits`` False when more than
    ``kv_free`` (the Python scheduler then frees or preempts). ``K`` < 0: no fixed k, so
    step 0 is never uniform."""
    B = len(run)
    k0 = np.zeros(B, np.int64)
    chunk = np.zeros(B, np.int64)
    pre0 = np.zeros(B, np.bool_)
    done0 = np.zeros(B, np.bool_)
    ndec = 0
    dec_tokens = 0
    for i in range(B):  # decode rows: k capped so no step overshoots; the lookup's draw
        r = run[i]
        if kv_len[r] >= ptarget[r]:
            kk = min(kpol[ndec] if use_kpol else K, max(output[r] - generated[r] - 1, 0))
            if not proposes_always and not _uniform(match_key[r], tsteps[r]) <= (
                    mprob[ndec] if use_mprob else match_rate):
                kk = 0
            k0[i] = kk
            dec_tokens += _width(kk, widths, use_tree)
            ndec += 1
        else:
            pre0[i] = True
    shrunk = False
    if dec_tokens > budget and ndec > 0:  # shrink drafts to fit the budget
        cap = _k_for_width(budget // ndec, widths, use_tree) if kfw < 0 else kfw
        dec_tokens = 0
        for i in range(B):
            if not pre0[i]:
                k0[i] = min(k0[i], cap)
                dec_tokens += _width(k0[i], widths, use_tree)
        shrunk = True
    room = max(budget - dec_tokens, 0)
    cum = 0  # prompt tokens of earlier prefill rows (admission order)
    first = True
    all_complete = True
    for i in range(B):
        if pre0[i]:
            r = run[i]
            rem = ptarget[r] - kv_len[r]
            if chunked:
                c = min(max(room - cum, 0), rem)
            else:
                c = rem if cum + rem <= room or (first and ndec == 0) else 0
            chunk[i] = c
            done0[i] = c >= rem
            all_complete = all_complete and done0[i]
            cum += rem
            first = False
    grow = 0  # KV growth for this step's writes
    for i in range(B):
        if not pre0[i]:
            r = run[i]
            held = kv_len[r] - shared[r] if use_shared else kv_len[r]
            grow += max(-(-(held + _width(k0[i], widths, use_tree)) // bs) - blocks[r], 0)
    fixed = K >= 0 and not shrunk and B * _width(K, widths, use_tree) <= budget
    return (grow <= kv_free, k0, chunk, pre0, done0, fixed and all_complete,
            fixed and not all_complete and chunked, grow)


@jit
def _shape_plan_priced(run, S, chunk_ok, kv_free, now, K, budget, chunked,
                       generated, output, tsteps, match_key, accept_key, cls_idx, alpha_scale,
                       kv_len, blocks, shared, use_shared, kv_total, kv_limit, kv_kept,
                       use_kept, alpha_table, proposes_always, match_rate, widths, use_tree,
                       bs, ptarget, hands_off, row_alpha, use_rows,
                       tp, cal, speculating, overlap, dkind, dp, dprefills, pass_rows, scal):
    """``_shape`` then ``_plan_priced`` in one call (the worker's loop, as
    ``Worker.loop`` runs it with the Python scheduler): S steps where step 0 is uniform
    (or chunking, with ``chunk_ok``), else one. Returns (fits, multi, pre0, chunking,
    S, m, Ia, Bo, Iv, F); with fits False the rest is empty."""
    fits, k0, chunk, pre0, done0, uniform, chunking, _ = _shape(
        run, kv_len, ptarget, output, generated, tsteps, match_key, blocks, K,
        proposes_always, match_rate, widths, use_tree, budget, chunked, kv_free, bs,
        kv_len, False, alpha_scale, False, -1, shared, use_shared)
    if not fits:
        return (False, False, pre0, False, 0, 0, np.empty((5, 0, 0), np.int64),
                np.empty((0, 0), np.bool_), np.empty((4, 0), np.int64), np.empty((11, 0)))
    multi = uniform or (chunking and chunk_ok)
    if not multi:
        S = 1
    chunking = chunking and S > 1
    S, m, Ia, Bo, Iv, F = _plan_priced(
        run, k0, chunk, pre0, done0, S, K, pre0.any(), generated, output, tsteps, match_key,
        accept_key, cls_idx, alpha_scale, kv_len, blocks, shared, use_shared, kv_total,
        kv_limit, kv_kept, use_kept, alpha_table, proposes_always, match_rate, widths,
        use_tree, bs, chunking, budget, ptarget, hands_off, row_alpha, use_rows, now,
        tp, cal, speculating, overlap, dkind, dp, dprefills, pass_rows, scal)
    return True, multi, pre0, chunking, S, m, Ia, Bo, Iv, F


# ------------------------------------------------------------------ committing


@jit
def _util(f, nb, s, peak, bw, power):
    """Watts per device of a phase of ``s`` seconds doing ``f`` FLOPs and moving ``nb``
    bytes: ``power`` = (idle, max, host, compute, memory), ``catalog.PowerCurve``'s
    idle + (max - idle) x min(1, host + compute x u_compute + memory x u_memory), each
    utilisation over the phase's own seconds (no seconds: the host floor)."""
    frac = power[2]
    if s > 0:
        frac = frac + power[3] * (f / (s * peak)) + power[4] * (nb / (s * bw))
    return power[0] + (power[1] - power[0]) * _minimum(frac, 1.0)


#: the ledger's sums in ``_account``'s output, after the n compute and n memory
#: utilisations: busy, draft and verify seconds, energy, WORK_KINDS' seconds and joules,
#: then per ledger.PHASES (draft, verify, prefill, host) seconds, joules, FLOPs and bytes
LEDGER_SUMS = 28


@jit
def _split(dr, rs, fd, fa, fr, pt, tk):
    """What one step's draft phase ``dr`` and the rest ``rs`` went to (ledger.WORK_KINDS:
    accepted, bonus, wasted, prefill): the draft phase shared over the ``fd`` drafted
    tokens (``fa`` accepted), the rest over the target pass's ``tk`` tokens (accepted,
    ``fr`` bonus, ``pt`` prompt, the remaining verified tokens rejected). The parts add
    up to dr + rs."""
    d_acc = dr * fa / fd if fd > 0 else 0.0
    per_tok = rs / tk if tk > 0 else 0.0
    return (d_acc + per_tok * fa, per_tok * fr,
            _maximum(dr - d_acc, 0.0) + per_tok * _maximum(tk - fa - fr - pt, 0.0)
            + (0.0 if tk > 0 else rs), per_tok * pt)


@jit
def _account(a, n, dt, draft, verify, flops, nbytes, phase, dflops, dbytes, fd, fa, fr,
             pf_tokens, tokens, devices, peak_flops, hbm_bw, power, Fo, sums):
    """The ledger (``ledger.Ledger``) of steps a..a+n: into Fo the compute and memory
    utilisation of each (Fo[0:n], Fo[n:2n], of peak), then LEDGER_SUMS sums (busy, draft,
    verify seconds, energy, the work split's seconds and joules, the phases' seconds,
    joules, FLOPs and bytes; numpy's summation order). Energy, one curve (``_util``) for
    every phase at its own utilisation: the draft phase (``phase``, per step: the drafter's
    passes and speculation's bookkeeping), the target's pass (its verify seconds, or the
    drafter's where an overlapped draft outlasts it; split between prefill and verify by
    its prompt tokens), and the rest of the step, the engine's bookkeeping, at the host
    floor (no kernel). ``fd``, ``fa``, ``fr`` (per step from 0): drafted and accepted
    tokens and decoding rows. Each sum is then added to the ledger's running one
    (``sums``: ``Ledger.sums``, the one place a ledger accumulates, whichever loop commits;
    empty: a plug-in ledger that accounts its steps itself)."""
    e_draft = np.empty(n)
    e_rest = np.empty(n)
    ws = np.empty((4, n))
    wj = np.empty((4, n))
    ps = np.zeros((16, n))  # per phase: seconds, joules, FLOPs, bytes (ledger.PHASES)
    for x in range(n):
        s = a + x
        d = dt[s]
        Fo[x] = flops[s] / (d * peak_flops)  # every planned iteration has tokens: dt > 0
        Fo[n + x] = nbytes[s] / (d * hbm_bw)
        ph = phase[x]
        tv = verify[s] if ph > 0 else _maximum(verify[s], draft[s])
        tf = flops[s] - dflops[s] if ph > 0 else flops[s]
        tb = nbytes[s] - dbytes[s] if ph > 0 else nbytes[s]
        host = _maximum(d - ph - tv, 0.0)
        e_draft[x] = devices * ph * _util(dflops[s], dbytes[s], ph, peak_flops, hbm_bw, power)
        e_tv = devices * tv * _util(tf, tb, tv, peak_flops, hbm_bw, power)
        e_host = devices * host * _util(0.0, 0.0, 0.0, peak_flops, hbm_bw, power)
        e_rest[x] = e_tv + e_host
        pre = pf_tokens[s] / tokens[s] if tokens[s] > 0 else 0.0
        ver = 1.0 - pre
        ps[0, x], ps[4, x], ps[8, x], ps[12, x] = ph, e_draft[x], dflops[s], dbytes[s]
        ps[1, x], ps[5, x], ps[9, x], ps[13, x] = tv * ver, e_tv * ver, tf * ver, tb * ver
        ps[2, x], ps[6, x], ps[10, x], ps[14, x] = tv * pre, e_tv * pre, tf * pre, tb * pre
        ps[3, x], ps[7, x] = host, e_host
        ws[0, x], ws[1, x], ws[2, x], ws[3, x] = _split(draft[s], d - draft[s], fd[x], fa[x],
                                                        fr[x], pf_tokens[s], tokens[s])
        wj[0, x], wj[1, x], wj[2, x], wj[3, x] = _split(e_draft[x], e_rest[x], fd[x], fa[x],
                                                        fr[x], pf_tokens[s], tokens[s])
    o = 2 * n
    Fo[o] = _sum(dt, a, n)
    Fo[o + 1] = _sum(draft, a, n)
    Fo[o + 2] = _sum(verify, a, n)
    Fo[o + 3] = _sum(e_draft, 0, n) + _sum(e_rest, 0, n)
    for w in range(4):
        Fo[o + 4 + w] = _sum(ws[w], 0, n)
        Fo[o + 8 + w] = _sum(wj[w], 0, n)
    for w in range(16):
        Fo[o + 12 + w] = _sum(ps[w], 0, n)
    for x in range(len(sums)):
        sums[x] += Fo[o + x]


@jit
def _commit(a, b, rows, emit, acc, k, alive, kv_add, finishing, after_rows, during, end, dt,
            draft, verify, flops, nbytes, dflops, dbytes, pf_tokens, tokens, first0, count0,
            prefill0,
            generated, accepted, bonus, drafted, tsteps, kv_len, blocks, last_delivery,
            first_token, finish,
            overlap, devices, peak_flops, hbm_bw, power, sums,
            hist, cls_idx, use_hist, buf, row0, record, wid, reason, start,
            chunked, pre, firsts, counted):
    """``Kernel.commit`` of steps [a, b) with ``Ledger.add``: updates the table in place and
    returns what the Python side hands on, packed (each array crossing back into Python
    costs a microsecond or so): Fo = (cu (n), mu (n), ledger sums (LEDGER_SUMS, already added
    to the ledger's ``sums``), the ITL gaps in the order ``Kernel.commit`` adds them (ng)); Io = the finished rows (nf); ng, nf; KV
    blocks held before and after; the peak during. With ``record``, the iteration log's
    ITER_COLUMNS of the n steps go into ``buf`` from row ``row0``
    (``Metrics.reserve_rows``), each column by name (``ITER.<column>``).
    ``chunked``: a segment through prefill chunks, whose (S, B) masks ``pre`` (prefilling),
    ``firsts`` (first token) and ``counted`` (a target step) replace step 0's."""
    B = len(rows)
    n = b - a
    # inter-token gaps: step a from each row's last delivery, later steps from the step
    # before; a prompt completing in a later step (chunked): its first token has no gap,
    # a recomputed one's runs from its last delivery before the preemption
    ng = 0
    for i in range(B):
        first = firsts[a, i] if chunked else (a == 0 and first0[i])
        if emit[a, i] > 0 and not first:
            ng += 1
    for s in range(a + 1, b):
        for i in range(B):
            if emit[s, i] > 0 and not (chunked and pre[s, i] and firsts[s, i]):
                ng += 1
    Fo = np.empty(2 * n + LEDGER_SUMS + ng)
    j = 2 * n + LEDGER_SUMS
    for i in range(B):
        first = firsts[a, i] if chunked else (a == 0 and first0[i])
        if emit[a, i] > 0 and not first:
            Fo[j] = end[a] - last_delivery[rows[i]]
            j += 1
    for s in range(a + 1, b):
        for i in range(B):
            if emit[s, i] > 0 and not (chunked and pre[s, i]):
                Fo[j] = dt[s]
                j += 1
        if chunked:
            for i in range(B):
                if emit[s, i] > 0 and pre[s, i] and not firsts[s, i]:
                    Fo[j] = end[s] - last_delivery[rows[i]]
                    j += 1
    if chunked:
        for s in range(a, b):
            for i in range(B):
                if firsts[s, i]:
                    first_token[rows[i]] = end[s]
    elif a == 0:
        for i in range(B):
            if first0[i]:
                first_token[rows[i]] = end[0]
    held_before = 0
    held_after = 0
    for i in range(B):
        held_before += blocks[rows[i]]
        held_after += after_rows[b - 1, i]
    for i in range(B):
        r = rows[i]
        e = 0
        ac = 0
        dl = 0
        kk = 0
        st = 0
        kv = 0
        for s in range(a, b):
            e += emit[s, i]
            ac += acc[s, i]
            if emit[s, i] > 0:
                dl += 1
            kk += k[s, i]
            if counted[s, i] if chunked else alive[s, i]:
                st += 1
            kv += kv_add[s, i]
        if not chunked and a == 0 and alive[0, i] and not count0[i]:
            st -= 1
        generated[r] += e
        accepted[r] += ac
        bonus[r] += dl
        drafted[r] += kk
        tsteps[r] += st
        kv_len[r] += kv
        if emit[b - 1, i] > 0:
            last_delivery[r] = end[b - 1]
        blocks[r] = after_rows[b - 1, i]
    peak = during[a]
    for s in range(a + 1, b):
        peak = max(peak, during[s])
    nf = 0
    for i in range(B):
        for s in range(a, b):
            if finishing[s, i]:
                nf += 1
                break
    Io = np.zeros(nf, np.int64)
    j = 0
    for i in range(B):
        for s in range(a, b):
            if finishing[s, i]:
                Io[j] = rows[i]
                finish[rows[i]] = end[s]
                last_delivery[rows[i]] = end[s]
                j += 1
                break
    # per step: drafted, accepted, decoding rows, the draft phase (none of its own when
    # it is hidden under the verify pass), then the ledger's accounting (``_account``)
    fd = np.empty(n)
    fa = np.empty(n)
    fr = np.empty(n)
    phase = np.empty(n)
    n_alive = np.zeros(n, np.int64)
    n_pre = np.zeros(n, np.int64)
    held_s = np.zeros(n, np.int64)
    for x in range(n):
        s = a + x
        ksum = 0
        acc_s = 0
        dec = 0
        for i in range(B):
            ksum += k[s, i]
            acc_s += acc[s, i]
            held_s[x] += after_rows[s, i]
            prefilling = pre[s, i] if chunked else (s == 0 and prefill0[i])
            if alive[s, i]:
                n_alive[x] += 1
                if not prefilling:
                    dec += 1
            if prefilling:
                n_pre[x] += 1
            if use_hist and k[s, i] > 0:  # accepted lengths per class
                hist[cls_idx[rows[i]], acc[s, i]] += 1
        fd[x] = np.float64(ksum)
        fa[x] = np.float64(acc_s)
        fr[x] = np.float64(dec)
        phase[x] = 0.0 if overlap else draft[a + x]
    _account(a, n, dt, draft, verify, flops, nbytes, phase, dflops, dbytes, fd, fa, fr,
             pf_tokens, tokens, devices, peak_flops, hbm_bw, power, Fo, sums)
    if record:  # the iteration log's columns, by name (iteration_log.ITER_COLUMNS)
        for x in range(n):
            s = a + x
            row = buf[row0 + x]
            row[ITER.time_s] = start[s]
            row[ITER.worker] = wid
            row[ITER.batch_size] = n_alive[x]
            row[ITER.decode_seqs] = n_alive[x] - n_pre[x]
            row[ITER.prefill_seqs] = n_pre[x]
            row[ITER.tokens] = tokens[s]
            row[ITER.drafted_tokens] = fd[x]
            row[ITER.draft_time_s] = draft[s]
            row[ITER.verify_time_s] = verify[s]
            row[ITER.compute_util] = Fo[x]
            row[ITER.memory_util] = Fo[n + x]
            row[ITER.kv_blocks_used] = held_s[x]
            row[ITER.policy_reason] = reason
    return Fo, Io, ng, nf, held_before, held_after, peak


# ------------------------------------------------------------------ the two ways to run them

#: the functions ``kernel.Kernel`` calls
ENTRY = ("_plan", "_price", "_combine", "_plan_priced", "_shape", "_shape_plan_priced",
         "_times", "_commit", "_account")


def functions(compiled: bool) -> SimpleNamespace:
    """The kernel's entry points (``ENTRY``, without the underscore): numba's compiled
    dispatchers, or their pure-Python versions (the same source). The last ones made are
    what Python callers run (``current``)."""
    global _draft_fn, _fns
    g = globals()
    _draft_fn = _draft if compiled else pure(_draft)  # draft_cost runs as the kernel does
    _fns = SimpleNamespace(**{name[1:]: g[name] if compiled else pure(g[name])
                              for name in ENTRY})
    return _fns


_fns = None  # the entry points the last kernel made runs (``functions``)


def current() -> SimpleNamespace:
    """The entry points as this process's kernel runs them, compiled or as Python source
    (the same bits), for Python callers of a kernel rule (``Executor.price``)."""
    return _fns if _fns is not None else functions(False)


# ------------------------------------------------------------------ drafters as data


def frozen(a, dtype=None) -> np.ndarray:
    """A read-only array (a view where ``a`` is one already of that dtype). Every array the
    kernel only reads is passed read-only, so numba compiles one specialisation whether a
    column came from pandas (read-only) or numpy (writable)."""
    v = np.asarray(a, dtype).view()
    v.flags.writeable = False
    return v


def same(obj, cls, *names) -> bool:
    """``obj``'s methods ``names`` are ``cls``'s own (not overridden on its type or itself)."""
    return all(getattr(type(obj), n, None) is getattr(cls, n) and n not in vars(obj)
               for n in names)


def cost_params(cm) -> np.ndarray | None:
    """A ForwardCostModel's parameter vector for ``_evaluate`` (``pass_params``); None
    where it cannot be priced here exactly (a class that prices differently)."""
    if not isinstance(cm, ForwardCostModel):
        return None
    if not same(cm, ForwardCostModel, "_evaluate", "_evaluate_parts", "pass_params",
                "time_and_work", "time", "iteration_overhead", "speculation_overhead"):
        return None
    try:
        return frozen(cm.pass_params(), np.float64)
    except (AttributeError, TypeError, ValueError):
        return None


def drafter_data(d, any_cost_steps: bool = False):
    """A built-in drafter as data for ``_draft``: (kind, cost parameters, scalar), from what
    it declares (``Drafter.kind``, ``.cost``, ``.scalar``); None where the kernel does not
    price it: no kind (drafters per class), a cost model it has no parameters for, or (unless
    ``any_cost_steps``) a ``cost_steps`` of its own (a plug-in's rules: the Python pricing
    hook calls it)."""
    kind = DRAFTER_KINDS.get(getattr(d, "kind", None))
    if kind is None:
        return None
    if not any_cost_steps and not d.priced_by_kernel():
        return None
    cm = getattr(d, "cost", None)
    p = frozen(np.zeros(len(pass_rule.PARAMS))) if cm is None else cost_params(cm)
    return None if p is None else (kind, p, float(getattr(d, "scalar", 0.0)))


_draft_fn = None  # ``_draft`` as the last kernel made runs it (``functions``)


def draft_cost(d, k, ctx, pf_tokens, pf_qc):
    """A built-in drafter's per-step (seconds, FLOPs, bytes) of a (steps x rows) plan: the
    kernel's ``_draft`` (``Drafter.cost_steps``, for a Python caller: the per-class drafter,
    the adaptive policies' estimates, reports), compiled where this process's kernel runs
    compiled, else as its Python source (the same bits)."""
    data = drafter_data(d, any_cost_steps=True)
    if data is None:
        raise TypeError(f"{type(d).__name__}: the kernel has no data for this drafter (no "
                        "kind, or a cost model without a parameter vector); give it its own "
                        "cost_steps")
    kind, p, scal = data
    k = np.ascontiguousarray(k, np.int64)
    S, B = k.shape
    out = np.zeros((3, S))
    tree = getattr(d, "tree", None)
    rows = frozen(tree.pass_rows if tree is not None else np.zeros(0), np.int64)
    fn = _draft_fn or pure(_draft)
    fn(S, B, frozen(k), frozen(np.ascontiguousarray(ctx, np.float64)),
       frozen(np.asarray(pf_tokens, np.float64)), frozen(np.asarray(pf_qc, np.float64)), kind,
       p, bool(d.prefills), rows, scal, out[0], out[1], out[2])
    return out[0], out[1], out[2]
