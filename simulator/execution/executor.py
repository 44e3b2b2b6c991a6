"""The executor: what one planned iteration costs on a worker (drafting + verification).

Its rules are the kernel's (``kernel_jit._price``: the target's pass by the one pass rule,
the drafter's passes by its kind, speculation's and the engine's overheads, combined by
``_combine``), so a Python caller (the adaptive policies' estimates, the pricing hook)
gets the bits the compiled plan gets. Only a plug-in (a cost model, drafter or executor
the kernel has no data for) is priced by its own methods, through the same combination.
"""

from __future__ import annotations

import numpy as np


class Executor:
    """Prices iterations: seconds, the draft/verify split, FLOPs and bytes per step.

    One iteration = the drafter's passes (serial with the target's pass unless the engine
    overlaps them) + the target's verify pass + speculation's own per-step work (proposal,
    rejection sampling, per-token bookkeeping) + the engine's CPU work for the batch.
    """

    def __init__(self, target, drafter, overlap_draft: bool, speculating: bool | None = None
                 ) -> None:
        self.target, self.drafter, self.overlap = target, drafter, overlap_draft
        # a configured speculator costs its per-step work even when a policy drafts nothing
        # (vLLM #49548); k = 0 in the scenario means none is configured
        self.speculating = drafter.name != "none" if speculating is None else speculating
        self._data = None

    def data(self) -> tuple | None:
        """The target and drafter as data for ``kernel_jit._price`` (its arguments after the
        plan's), or None where the kernel has none: a plug-in cost model, drafter or
        executor, drafters per class (``plugins.pricing_plugins``, ``drafter_data``)."""
        if self._data is None:
            from specsim.simulator.execution import kernel_jit as kj
            from specsim.simulator.execution.plugins import pricing_plugins

            tp = None if pricing_plugins(self) else kj.cost_params(self.target)
            dk = kj.drafter_data(self.drafter) if tp is not None else None
            if dk is None:
                self._data = False
            else:
                cal = _cal(self.target)
                tree = getattr(self.drafter, "tree", None)
                rows = kj.frozen(tree.pass_rows if tree is not None else np.zeros(0),
                                 np.int64)
                self._data = (tp, cal, bool(self.speculating), bool(self.overlap), dk[0],
                              dk[1], bool(self.drafter.prefills), rows, dk[2])
        return self._data or None

    def price(self, k: np.ndarray, ctx: np.ndarray, tokens: np.ndarray, qc: np.ndarray,
              csum: np.ndarray, logits: np.ndarray, pf_tokens: np.ndarray,
              pf_qc: np.ndarray, seqs: np.ndarray, chunks: np.ndarray) -> tuple[np.ndarray, ...]:
        """Per step: (seconds, draft s, verify s, FLOPs, bytes, draft FLOPs, draft bytes) of a
        (steps x rows) plan (the draft phase's own work, for its own utilisation and power).

        ``seqs`` and ``chunks`` count each step's rows with work and its prompt chunks.
        """
        from specsim.simulator.execution import kernel_jit as kj

        fn = kj.current()
        k, ctx = np.require(k, np.int64, "CW"), np.require(ctx, np.float64, "CW")
        S, B = k.shape
        f = [np.require(x, np.float64, "CW") for x in (tokens, qc, csum, logits, pf_tokens,
                                                        pf_qc)]
        seqs_i = np.require(seqs, np.int64, "CW")
        chunks = np.require(chunks, np.float64, "CW")
        out = np.empty((7, S))
        data = self.data()
        if data is not None:
            fn.price(S, B, k, ctx, *f, seqs_i, chunks, *data, out)
            return tuple(out)
        return self._hook(fn, k, ctx, f, seqs, seqs_i, chunks, out)

    def _hook(self, fn, k, ctx, f, seqs, seqs_i, chunks, out) -> tuple[np.ndarray, ...]:
        """The Python pricing hook: a plug-in's own ``time_and_work`` / ``cost_steps`` /
        overheads, combined by the kernel's ``_combine``."""
        from specsim.simulator.execution import kernel_jit as kj
        from specsim.simulator.execution.plugins import foreign

        tokens, qc, csum, logits, pf_tokens, pf_qc = f
        tg = self.target
        window = getattr(tg, "_window", 0.0)
        if window > 0 or getattr(tg, "_state_bytes_per_seq", 0.0) > 0:
            # the layer kinds' sums (pass_rule): sum_i min(c_i, W), the sequences
            ctxw = np.minimum(ctx, window).sum(axis=1) if window > 0 else csum
            work = tg.time_and_work(tokens, qc, csum, logits, ctxw=ctxw, seqs=seqs)
        else:
            work = tg.time_and_work(tokens, qc, csum, logits)
        z = pf_tokens if self.drafter.prefills else np.zeros_like(pf_tokens)
        draft = self.drafter.cost_steps(k, ctx, z, pf_qc if self.drafter.prefills else z)
        for row, x in zip((2, 3, 4, 1, 5, 6), (*work, *draft), strict=True):
            out[row] = x
        S, B = k.shape
        if kj.cost_params(tg) is not None and not foreign(tg, _OVERHEADS):
            # a built-in cost model's overheads are the kernel's (its ``cal``)
            fn.combine(S, B, k, seqs_i, chunks, _cal(tg), bool(self.speculating),
                       bool(self.overlap), out[0], out[0], False, out)
        else:  # a plug-in cost model's own overheads
            spec = (np.ascontiguousarray(tg.speculation_overhead(
                np.asarray(seqs) - chunks, k.sum(axis=1)), np.float64)
                if self.speculating else np.zeros(S))
            it = np.ascontiguousarray(tg.iteration_overhead(seqs, chunks), np.float64)
            fn.combine(S, B, k, seqs_i, chunks, np.zeros(6), bool(self.speculating),
                       bool(self.overlap), spec, it, True, out)
        return tuple(out)


_OVERHEADS = ("iteration_overhead", "speculation_overhead")


def _cal(cm) -> np.ndarray:
    """A built-in cost model's overheads as ``_combine`` reads them: engine fixed / per
    sequence / per prefill, speculation per step / per sequence / per drafted token."""
    c = cm.cal
    a = np.array([c.engine_fixed_s, c.engine_per_seq_s, c.engine_per_prefill_s,
                  c.spec_step_overhead_s, c.spec_seq_overhead_s, c.spec_token_overhead_s],
                 np.float64)
    a.flags.writeable = False
    return a
