"""What the kernel plans: step 0's shape (from the batch scheduler) and a segment of S
iterations (steps x rows arrays). Their own module so that the batch scheduler, the Python
kernel and the compiled kernel all read them without importing one another.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class StepShape:
    """Step 0 of a segment as the batch scheduler shaped it (one entry per batch row)."""

    rows: np.ndarray  # request-table rows in the batch
    k: np.ndarray  # draft length of each decode row (0 for prefill rows)
    chunk: np.ndarray  # prefill tokens this step (0 for decode rows)
    prefill: np.ndarray  # bool: the row is prefilling in step 0
    completes: np.ndarray  # bool: its prefill finishes in step 0 (it then emits one token)
    uniform: bool  # step 0 equals what the fixed-k rule gives (no budget shrink, no partial chunk)
    # as uniform but for prefills left in chunks: later steps may go on chunking them
    # (``budget`` tokens a step, decode rows first); the segment ends where one completes
    chunking: bool = False
    budget: int = 0


@dataclass
class Segment:
    """S planned iterations of one worker; ``m`` of them valid, ``done`` already committed."""

    rows: np.ndarray
    start: np.ndarray  # (S,) seconds
    end: np.ndarray
    dt: np.ndarray
    draft: np.ndarray
    verify: np.ndarray
    flops: np.ndarray
    nbytes: np.ndarray
    tokens: np.ndarray
    k: np.ndarray  # (S, B) drafted tokens
    acc: np.ndarray  # accepted drafts
    emit: np.ndarray  # tokens delivered
    kv_add: np.ndarray  # tokens whose KV lands in the cache
    count0: np.ndarray  # (B,) bool: step 0 is a target (verification) step of the row
    alive: np.ndarray  # bool: the row takes part in the step
    finishing: np.ndarray  # bool: the row's last token comes in this step
    during: np.ndarray  # (S,) KV blocks held while the step runs
    after_rows: np.ndarray  # (S, B) blocks each row keeps after the step
    prefill0: np.ndarray  # (B,) bool: prefilling in step 0
    first0: np.ndarray  # (B,) bool: first token of the request in step 0
    m: int
    dflops: np.ndarray | None = None  # (S,) the draft phase's own FLOPs and bytes
    dbytes: np.ndarray | None = None
    pf_tokens: np.ndarray | None = None  # (S,) prompt tokens in each step's target pass
    done: int = 0
    reason: int = 0  # the speculation policy's decision (Metrics.reason_code)
    spec_free: np.ndarray | None = None  # (S,) blocks of rejected drafts, freed after the step
    spec_alloc: np.ndarray | None = None  # (S,) blocks decode rows took for the step's tokens
    # a segment through prefill chunks (None otherwise: only step 0 may prefill), (S, B):
    # the row prefills in the step / gets its first token / the step counts as a target step
    pre_steps: np.ndarray | None = None
    first_steps: np.ndarray | None = None
    counted: np.ndarray | None = None

    def steps_ending_by(self, t: float, strict: bool = False) -> int:
        """How many planned steps have ended by time t (end <= t, or < t if strict)."""
        side = "left" if strict else "right"
        return min(int(self.end[: self.m].searchsorted(t, side=side)), self.m)

    def steps_started_before(self, t: float) -> int:
        return min(int(self.start[: self.m].searchsorted(t, side="left")), self.m)
