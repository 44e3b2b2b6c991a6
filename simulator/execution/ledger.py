"""The ledger of one worker: busy time, the draft/verify split, energy and what the time
and energy went to (``WORK_KINDS``). The kernel's commit accounts each stretch of steps
(``kernel_jit._account``) and hands the sums to ``take``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from specsim.cost_models.catalog import PowerCurve, power_curve


@dataclass
class Ledger:
    """Busy time, draft/verify split, energy and iteration count of one worker; ``curve``
    the accelerator's power by utilisation (``catalog.power_curve``; None: the catalog's
    default)."""

    devices: int
    peak_flops: float
    hbm_bw: float
    power_idle: float
    power_max: float
    curve: PowerCurve | None = None
    busy_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    energy_j: float = 0.0  # busy energy of the group (all its devices)
    iterations: int = 0

    work_s: dict = field(default_factory=lambda: dict.fromkeys(WORK_KINDS, 0.0))
    work_j: dict = field(default_factory=lambda: dict.fromkeys(WORK_KINDS, 0.0))
    # per PHASES: worker seconds, joules (all devices), FLOPs and bytes per device
    phase_s: dict = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    phase_j: dict = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    phase_flops: dict = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    phase_bytes: dict = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))

    def __post_init__(self) -> None:
        if self.curve is None:
            self.curve = power_curve("default")
        c = self.curve
        self.power = np.array([float(self.power_idle), float(self.power_max), c.host,
                               c.compute, c.memory])
        self.power.flags.writeable = False  # one compiled specialisation (kernel_jit.frozen)

    def add(self, dt, draft, verify, flops, nbytes, draft_phase, dflops, dbytes, drafted,
            accepted, decode_rows, prefill_tokens, tokens) -> tuple[np.ndarray, np.ndarray]:
        """Account iterations (per-step arrays); returns their compute and memory utilisation
        (of peak). The kernel's ``_account`` does the accounting (the kernel's commit calls
        it directly and hands its sums to ``take``).

        Energy: each phase (``PHASES``) at its own utilisation on the accelerator's power
        curve; the draft phase and the rest of the step are split over what the step
        produced (``WORK_KINDS``, see ``split_work``)."""
        from specsim.simulator.execution import kernel_jit as kj

        n = len(dt)
        f = [np.ascontiguousarray(x, np.float64) for x in (
            dt, draft, verify, flops, nbytes, draft_phase, dflops, dbytes, drafted, accepted,
            decode_rows, prefill_tokens, tokens)]
        out = np.empty(2 * n + kj.LEDGER_SUMS)
        kj._account(0, n, *f, self.devices, float(self.peak_flops), float(self.hbm_bw),
                    self.power, out)
        self.take(n, out[2 * n:])
        return out[:n], out[n:2 * n]

    def take(self, n: int, sums: np.ndarray) -> None:
        """Add ``n`` iterations' sums (``kernel_jit._account``: busy, draft and verify
        seconds, energy, WORK_KINDS' seconds and joules, PHASES' seconds, joules, FLOPs
        and bytes)."""
        s = sums.tolist()
        self.iterations += n
        self.busy_s += s[0]
        self.draft_s += s[1]
        self.verify_s += s[2]
        self.energy_j += s[3]
        for w, kind in enumerate(WORK_KINDS):
            self.work_s[kind] += s[4 + w]
        for w, kind in enumerate(WORK_KINDS):
            self.work_j[kind] += s[8 + w]
        for w, p in enumerate(PHASES):
            self.phase_s[p] += s[12 + w]
            self.phase_j[p] += s[16 + w]
            self.phase_flops[p] += s[20 + w]
            self.phase_bytes[p] += s[24 + w]


#: what a step's time and energy went to: accepted draft tokens, bonus tokens (one per
#: decoding row), rejected work (rejected drafts, tree nodes off the accepted path, and
#: speculation's cost in a step that drafted nothing), prompt tokens
WORK_KINDS = ("accepted", "bonus", "wasted", "prefill")

#: where a step's time and energy went by what the device did: ``draft`` the drafter's
#: passes and speculation's own bookkeeping (the draft phase), ``verify`` the target's pass
#: over decoding rows (a plain decode pass without speculation), ``prefill`` the target's
#: pass over prompt tokens (the pass split by its tokens), ``host`` the engine's CPU
#: bookkeeping while the GPU waits; the fleet adds ``idle`` (nothing in flight)
PHASES = ("draft", "verify", "prefill", "host")


def split_work(draft, rest, drafted, accepted, decode_rows, prefill_tokens, tokens
               ) -> dict[str, np.ndarray]:
    """Per step: the draft phase shared over drafted tokens (accepted vs rejected), the rest
    of the step over the target pass's tokens (accepted, bonus, prompt, and the remaining
    verified tokens, which were rejected). The parts add up to draft + rest exactly
    (``kernel_jit._split``, step by step)."""
    from specsim.simulator.execution import kernel_jit as kj

    cols = np.broadcast_arrays(*(np.asarray(x, np.float64) for x in (
        draft, rest, drafted, accepted, decode_rows, prefill_tokens, tokens)))
    rows = zip(*(c.tolist() for c in cols), strict=True)
    parts = np.array([kj._split(*v) for v in rows]).reshape(-1, 4)
    return dict(zip(WORK_KINDS, parts.T, strict=True))
