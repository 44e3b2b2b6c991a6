"""The ledger of one worker: busy time, the draft/verify split, energy and what the time
and energy went to (``WORK_KINDS``). Python and compiled commits both add to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Ledger:
    """Busy time, draft/verify split, energy and iteration count of one worker."""

    devices: int
    peak_flops: float
    hbm_bw: float
    power_idle: float
    power_max: float
    busy_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    energy_j: float = 0.0  # busy energy of the group (all its devices)
    iterations: int = 0

    work_s: dict = field(default_factory=lambda: dict.fromkeys(WORK_KINDS, 0.0))
    work_j: dict = field(default_factory=lambda: dict.fromkeys(WORK_KINDS, 0.0))

    def _util(self, flops, nbytes, seconds):
        with np.errstate(invalid="ignore", divide="ignore"):
            u = np.maximum(flops / (seconds * self.peak_flops), nbytes / (seconds * self.hbm_bw))
        return np.where(seconds > 0, np.minimum(u, 1.0), 0.0)

    def add(self, dt, draft, verify, flops, nbytes, draft_phase, dflops, dbytes, drafted,
            accepted, decode_rows, prefill_tokens, tokens) -> tuple[np.ndarray, np.ndarray]:
        """Account iterations; returns their compute and memory utilisation (of peak).

        Energy: the draft phase at its own utilisation, the rest of the step (verify pass,
        engine and speculation overheads) at its own. Both are split over what the step
        produced (``WORK_KINDS``, see ``split_work``)."""
        cu = flops / (dt * self.peak_flops)  # every planned iteration has tokens: dt > 0
        mu = nbytes / (dt * self.hbm_bw)
        rest = np.maximum(dt - draft_phase, 0.0)
        dp = self.power_max - self.power_idle
        e_draft = self.devices * draft_phase * (
            self.power_idle + dp * self._util(dflops, dbytes, draft_phase))
        e_rest = self.devices * rest * (
            self.power_idle + dp * self._util(flops - dflops, nbytes - dbytes, rest))
        busy = float(dt.sum())
        self.iterations += len(dt)
        self.busy_s += busy
        self.draft_s += float(draft.sum())
        self.verify_s += float(verify.sum())
        self.energy_j += float(e_draft.sum() + e_rest.sum())
        shares = (drafted, accepted, decode_rows, prefill_tokens, tokens)
        for kind, v in split_work(draft, dt - draft, *shares).items():
            self.work_s[kind] += float(v.sum())
        for kind, v in split_work(e_draft, e_rest, *shares).items():
            self.work_j[kind] += float(v.sum())
        return cu, mu


#: what a step's time and energy went to: accepted draft tokens, bonus tokens (one per
#: decoding row), rejected work (rejected drafts, tree nodes off the accepted path, and
#: speculation's cost in a step that drafted nothing), prompt tokens
WORK_KINDS = ("accepted", "bonus", "wasted", "prefill")


def split_work(draft, rest, drafted, accepted, decode_rows, prefill_tokens, tokens
               ) -> dict[str, np.ndarray]:
    """Per step: the draft phase shared over drafted tokens (accepted vs rejected), the rest
    of the step over the target pass's tokens (accepted, bonus, prompt, and the remaining
    verified tokens, which were rejected). The parts add up to draft + rest exactly."""
    with np.errstate(invalid="ignore", divide="ignore"):
        d_acc = np.where(drafted > 0, draft * accepted / drafted, 0.0)
        per_tok = np.where(tokens > 0, rest / tokens, 0.0)
    acc = d_acc + per_tok * accepted
    bonus = per_tok * decode_rows
    prefill = per_tok * prefill_tokens
    rest_other = np.where(tokens > 0, 0.0, rest)  # a step without target tokens: overhead
    wasted = np.maximum(draft - d_acc, 0.0) + per_tok * np.maximum(
        tokens - accepted - decode_rows - prefill_tokens, 0.0) + rest_other
    return {"accepted": acc, "bonus": bonus, "wasted": wasted, "prefill": prefill}
