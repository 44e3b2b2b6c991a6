"""A paged KV-cache allocator: fixed-size blocks, counted, never leaked.

Blocks are fungible here (the radix prefix cache is a later layer), so the allocator keeps
counts, and each request's holding lives in the request table. ``check`` asserts the
invariant the tests rely on: used == sum of what requests hold.
"""

from __future__ import annotations

from specsim.simulator.execution.loop_rules import commit_held


class BlockAllocator:
    """Counts free and used blocks of one worker's KV pool."""

    def __init__(self, total_blocks: int, block_size: int, state_blocks: int = 0) -> None:
        self.total = int(total_blocks)
        self.block_size = int(block_size)
        # blocks every admitted request holds besides its tokens' KV (a model with
        # sliding-window or linear-attention layers: Deployment.state_blocks)
        self.state_blocks = int(state_blocks)
        self.used = 0
        self.peak = 0

    @property
    def free(self) -> int:
        return self.total - self.used

    @property
    def held(self) -> int:
        """Blocks the requests hold (all of them here; a prefix cache also has cached
        pages, see prefix_cache.PrefixKV)."""
        return self.used

    def blocks_for(self, tokens):
        """Blocks needed to hold ``tokens`` tokens (works on arrays)."""
        return -(-tokens // self.block_size)

    def allocate(self, n: int) -> None:
        if n < 0 or n > self.free:
            raise RuntimeError(f"KV allocator: cannot allocate {n} blocks ({self.free} free)")
        self.used += n
        if self.used > self.peak:
            self.peak = self.used

    def release(self, n: int) -> None:
        if n < 0 or n > self.used:
            raise RuntimeError(f"KV allocator: cannot free {n} blocks ({self.used} used)")
        self.used -= n

    def set_held(self, held_before: int, held_after: int, peak_during: int) -> None:
        """A committed stretch of steps: its rows held ``held_before`` blocks, now hold
        ``held_after``; at most ``peak_during`` were in use while it ran."""
        ok, used, peak = commit_held(self.used, self.peak, self.total, held_before,
                                     held_after, peak_during)
        if not ok:
            raise RuntimeError(f"KV allocator: {used} blocks used of {self.total} after a "
                               f"commit (peak {peak_during})")
        self.used, self.peak = used, peak
