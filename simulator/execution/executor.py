"""The executor: what one planned iteration costs on a worker (drafting + verification).

The target's pass is priced by the roofline (cost_models) from batch aggregates; the
drafter prices its own passes. Both are vectorised over a segment's steps.
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

    def price(self, k: np.ndarray, ctx: np.ndarray, tokens: np.ndarray, qc: np.ndarray,
              csum: np.ndarray, logits: np.ndarray, pf_tokens: np.ndarray,
              pf_qc: np.ndarray, seqs: np.ndarray, chunks: np.ndarray) -> tuple[np.ndarray, ...]:
        """Per step: (seconds, draft s, verify s, FLOPs, bytes, draft FLOPs, draft bytes) of a
        (steps x rows) plan (the draft phase's own work, for its own utilisation and power).

        ``seqs`` and ``chunks`` count each step's rows with work and its prompt chunks.
        """
        window = getattr(self.target, "_window", 0.0)
        if window > 0 or getattr(self.target, "_state_bytes_per_seq", 0.0) > 0:
            # the layer kinds' sums (pass_rule): sum_i min(c_i, W), the sequences
            ctxw = (np.array([r.sum() for r in np.minimum(ctx, window)]) if window > 0
                    else csum)
            vt, vf, vb = self.target.time_and_work(tokens, qc, csum, logits, ctxw=ctxw,
                                                   seqs=seqs)
        else:
            vt, vf, vb = self.target.time_and_work(tokens, qc, csum, logits)
        if self.drafter.prefills:
            dtt, dtf, dtb = self.drafter.cost_steps(k, ctx, pf_tokens, pf_qc)
        else:
            z = np.zeros_like(pf_tokens)
            dtt, dtf, dtb = self.drafter.cost_steps(k, ctx, z, z)
        if self.speculating:
            dtt = dtt + self.target.speculation_overhead(seqs - chunks, k.sum(axis=1))
        dt = np.maximum(dtt, vt) if self.overlap else dtt + vt
        dt = dt + self.target.iteration_overhead(seqs, chunks)
        return dt, dtt, vt, vf + dtf, vb + dtb, dtf, dtb
