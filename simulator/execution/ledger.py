"""The ledger of one worker: busy time, the draft/verify split, energy and what the time
and energy went to (``WORK_KINDS``). The kernel's commit accounts each stretch of steps
(``kernel_jit._account``), which adds each sum to the ledger's ``sums`` in place, whichever
loop commits (the SimPy worker's or the compiled solo loop); ``take`` counts the iterations.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass, field

import numpy as np

from specsim.cost_models.catalog import PowerCurve, power_curve


def _zero_sums() -> np.ndarray:
    """A fresh ledger's sums: ``kernel_jit.LEDGER_SUMS`` zeros (the layout ``_account``
    writes, counted there once)."""
    from specsim.simulator.execution.kernel_jit import LEDGER_SUMS

    return np.zeros(LEDGER_SUMS)


@dataclass
class Ledger:
    """Busy time, draft/verify split, energy and iteration count of one worker; ``curve``
    the accelerator's power by utilisation (``catalog.power_curve``; None: the catalog's
    default).

    The running sums live in one array, ``sums``, in ``kernel_jit._account``'s order
    (``LEDGER_SUMS``: busy, draft and verify seconds, energy, WORK_KINDS' seconds and joules,
    then per PHASES seconds, joules, FLOPs and bytes per device), so the kernel's accounting
    (``_account``) adds a commit's sums into it, compiled, instead of 28 dict updates. ``busy_s``, ``work_s[kind]`` and the rest read
    (and write) it by name."""

    devices: int
    peak_flops: float
    hbm_bw: float
    power_idle: float
    power_max: float
    curve: PowerCurve | None = None
    iterations: int = 0
    sums: np.ndarray = field(default_factory=_zero_sums, repr=False)

    busy_s = property(lambda self: float(self.sums[0]),
                      lambda self, v: self.sums.__setitem__(0, v))
    draft_s = property(lambda self: float(self.sums[1]),
                       lambda self, v: self.sums.__setitem__(1, v))
    verify_s = property(lambda self: float(self.sums[2]),
                        lambda self, v: self.sums.__setitem__(2, v))
    energy_j = property(lambda self: float(self.sums[3]),  # busy energy, all its devices
                        lambda self, v: self.sums.__setitem__(3, v))
    work_s = property(lambda self: Sums(self.sums, 4, WORK_KINDS))
    work_j = property(lambda self: Sums(self.sums, 8, WORK_KINDS))
    # per PHASES: worker seconds, joules (all devices), FLOPs and bytes per device
    phase_s = property(lambda self: Sums(self.sums, 12, PHASES))
    phase_j = property(lambda self: Sums(self.sums, 16, PHASES))
    phase_flops = property(lambda self: Sums(self.sums, 20, PHASES))
    phase_bytes = property(lambda self: Sums(self.sums, 24, PHASES))

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
        (of peak). The kernel's ``_account`` does the accounting and adds the sums to
        ``self.sums`` (the kernel's commit calls it directly, then ``take``).

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
                    self.power, out, self.sums)
        self.take(n)
        return out[:n], out[n:2 * n]

    def take(self, n: int) -> None:
        """Count ``n`` iterations whose sums ``kernel_jit._account`` has added to ``sums``."""
        self.iterations += n


class Sums(MutableMapping):
    """Some of a ledger's sums by name (a WORK_KINDS or PHASES slice of ``Ledger.sums``);
    reading and writing go to the array."""

    __slots__ = ("_a", "_lo", "_names")

    def __init__(self, a: np.ndarray, lo: int, names: tuple[str, ...]) -> None:
        self._a, self._lo, self._names = a, lo, names

    def _at(self, key: str) -> int:
        if key not in self._names:
            raise KeyError(key)
        return self._lo + self._names.index(key)

    def __getitem__(self, key: str) -> float:
        return float(self._a[self._at(key)])

    def __setitem__(self, key: str, value: float) -> None:
        self._a[self._at(key)] = value

    def __delitem__(self, key: str) -> None:
        raise TypeError("a ledger's sums cannot be removed")

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return repr(dict(self))


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
