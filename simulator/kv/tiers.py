"""Where one worker's KV pages live: memory tiers, their free pages, and moves between them.

Tiers are an ordered list, fastest first (HBM, host DRAM, remote DRAM over RDMA, storage),
each with a capacity in pages. A tier holds cached pages (keyed in the radix tree,
``simulator/kv/radix.py``, which counts them per tier) and pages the tree does not key:
held pages in the top tier (a running request's private pages, ``allocate`` / ``free``;
draft and verify tokens' pages are among them) and parked pages in any tier (a swapped-out
request's KV, ``park`` / ``unpark``). All count against the tier's capacity, so a request's
pages compete with cached prefixes.

Room is made by moving unreferenced cached pages one tier down (``demote``; a full lowest
tier frees them, ``RadixCache.evict``), victims in the tree's eviction order; a hit on a
lower tier is moved up by ``promote``, which returns the pages and bytes moved and the
transfer time (the caller charges it). Invariant 1 (conservation per tier) is checked here;
the tree's own invariants in ``RadixCache.check``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from specsim.simulator.kv.radix import (
    MatchResult,
    RadixCache,
    RadixEvictionStrategy,
    TreeNode,
    Verdict,
)


@dataclass(frozen=True)
class Tier:
    """One memory tier: capacity in pages; bandwidth and latency of moving pages between it
    and the tier above (a move between tiers a < b is charged at tier b's figures)."""

    name: str
    capacity_pages: int
    bandwidth_bytes_s: float = math.inf
    latency_s: float = 0.0


@dataclass
class PromoteResult:
    """What a promotion moved: pages and bytes in all, pages per source tier, and the
    transfer time (per source tier: its latency + bytes / its bandwidth, summed)."""

    pages: int = 0
    bytes: int = 0
    pages_by_source: dict[str, int] = field(default_factory=dict)
    transfer_s: float = 0.0


class TierStore:
    """One worker's KV memory: tiers with capacities, the pages outside the tree (held,
    parked), free pages per tier, and demotion / promotion of the tree's cached pages.
    ``tree`` is the radix tree over what is cached (match, insert, lock, evict)."""

    def __init__(self, tiers: Sequence[Tier] | int, *, page_tokens: int = 16,
                 page_bytes: int = 0, eviction: str | RadixEvictionStrategy = "lru") -> None:
        if isinstance(tiers, int):
            tiers = [Tier("hbm", tiers)]
        self.tiers: list[Tier] = list(tiers)
        if not self.tiers:
            raise ValueError("a radix cache needs at least one tier")
        names = [t.name for t in self.tiers]
        if len(set(names)) != len(names):
            raise ValueError(f"tier names must be unique: {names}")
        self.page_bytes = int(page_bytes)
        self.tree = RadixCache(names, self, page_tokens=page_tokens, eviction=eviction)
        self._cap = [int(t.capacity_pages) for t in self.tiers]
        self._held = 0
        self._parked = [0] * len(names)  # swapped-out KV parked in a tier (unkeyed)
        pairs = {(a, b): 0 for a in names for b in names if a != b}
        self.stats = {"moved_pages": dict(pairs), "moved_bytes": dict(pairs)}

    # -- capacity ---------------------------------------------------------------------
    def _t(self, tier: str | int) -> int:
        return self.tree.tier(tier)

    def capacity(self, tier: str | int = 0) -> int:
        return self._cap[self._t(tier)]

    def cached_pages(self, tier: str | int = 0) -> int:
        return self.tree.cached_pages(tier)

    def locked_pages(self, tier: str | int = 0) -> int:
        """Cached pages on locked paths in ``tier`` (never evicted or demoted)."""
        return self.tree.locked_pages(tier)

    def used_pages(self, tier: str | int = 0) -> int:
        t = self._t(tier)
        return self.tree.cached_pages(t) + self._parked[t] + (self._held if t == 0 else 0)

    def free_pages(self, tier: str | int = 0) -> int:
        t = self._t(tier)
        return (self._cap[t] - self.tree.cached_pages(t) - self._parked[t]
                - (self._held if t == 0 else 0))

    def parked_pages(self, tier: str | int = 0) -> int:
        return self._parked[self._t(tier)]

    @property
    def held_pages(self) -> int:
        return self._held

    # -- moving cached pages ----------------------------------------------------------
    def _transfer(self, node: TreeNode, to: int) -> None:
        pair = (self.tiers[node.tier].name, self.tiers[to].name)
        p = len(node.key)
        self.stats["moved_pages"][pair] += p
        self.stats["moved_bytes"][pair] += p * self.page_bytes
        self.tree.retier(node, to)

    def demote(self, n_pages: int, from_tier: str | int = 0,
               to_tier: str | int | None = None) -> int:
        """Move up to ``n_pages`` unreferenced pages from ``from_tier`` down to ``to_tier``
        (the next tier by default), lowest strategy key first, making room there by
        demoting further (or freeing, in the lowest tier). Returns the pages moved."""
        f = self._t(from_tier)
        to = f + 1 if to_tier is None else self._t(to_tier)
        if to <= f:
            raise ValueError(f"demote goes down the tiers: {from_tier!r} -> {to_tier!r}")
        tree = self.tree
        want = min(n_pages, tree.cached_pages(f) - tree.locked_pages(f))
        if want <= 0:
            return 0
        if self.free_pages(to) < want:  # once, up front: never frees what this call moves
            self._make_room(to, want)
        moved = 0

        def visit(node: TreeNode) -> Verdict:
            nonlocal moved
            if any(c.tier < to for c in node.children.values()):
                return "skip"  # would sit below a child: not with this target
            room = min(n_pages - moved, len(node.key), self.free_pages(to))
            if room <= 0:
                return "stop"
            if len(node.key) > room:
                tree.split(node, len(node.key) - room)
            self._transfer(node, to)
            moved += room
            return "done" if moved >= n_pages else "used"

        tree.victims(f, visit)
        return moved

    def _make_room(self, t: int, need: int) -> bool:
        deficit = need - self.free_pages(t)
        if deficit <= 0:
            return True
        if t + 1 < len(self.tiers):
            deficit -= self.demote(deficit, t, t + 1)
        if deficit > 0:
            deficit -= self.tree.evict(deficit, t)
        return deficit <= 0

    def make_room(self, n_pages: int, tier: str | int = 0) -> bool:
        """Demote / evict until ``n_pages`` are free in ``tier`` (best effort: False if
        locks prevent it, after freeing what it could)."""
        return self._make_room(self._t(tier), n_pages)

    def _room_for(self, n_pages: int, t: int = 0) -> bool:
        """All or nothing in tier ``t``: nothing is evicted when even every unlocked
        page would not be enough."""
        tree = self.tree
        if n_pages - self.free_pages(t) > tree.cached_pages(t) - tree.locked_pages(t):
            return False
        return self._make_room(t, n_pages)

    def promote(self, node: TreeNode | MatchResult, to_tier: str | int = 0) -> PromoteResult:
        """Move the path down to ``node`` up into ``to_tier`` (making room there), top-down;
        what does not fit stays where it is. Returns the pages and bytes moved and the
        transfer time; the caller charges it (and decides what overlaps compute)."""
        to = self._t(to_tier)
        tree = self.tree
        node = node.last_node if isinstance(node, MatchResult) else node
        res = PromoteResult()
        low = [nd for nd in tree.path(node) if nd.tier > to]
        need = sum(len(nd.key) for nd in low)
        if need == 0:
            return res
        src_pages = [0] * len(self.tiers)
        tree.lock(node)
        try:
            self._make_room(to, need)
            for nd in low:
                room = self.free_pages(to)
                if room <= 0:
                    break
                if len(nd.key) > room:
                    nd = tree.split(nd, room)
                src_pages[nd.tier] += len(nd.key)
                self._transfer(nd, to)
        finally:
            tree.unlock(node)
        for s, p in enumerate(src_pages):
            if p:
                tier, b = self.tiers[s], p * self.page_bytes
                res.pages += p
                res.bytes += b
                res.pages_by_source[tier.name] = p
                res.transfer_s += tier.latency_s + (b / tier.bandwidth_bytes_s if b else 0.0)
        return res

    # -- pages outside the tree -------------------------------------------------------
    def allocate(self, n_pages: int) -> bool:
        """Hold ``n_pages`` top-tier pages privately (a running request's unkeyed pages)."""
        if n_pages < 0 or not self._room_for(n_pages):
            return False
        self._held += n_pages
        return True

    def free(self, n_pages: int) -> None:
        if not 0 <= n_pages <= self._held:
            raise RuntimeError(f"radix cache: cannot free {n_pages} held pages "
                               f"({self._held} held)")
        self._held -= n_pages

    def resize_held(self, delta: int) -> None:
        """Change the held pages by ``delta`` without making room (the caller already
        checked it fits: a committed stretch of iterations)."""
        held = self._held + delta
        if held < 0 or delta > self.free_pages(0):
            raise RuntimeError(f"radix cache: cannot hold {held} pages ({self._held} held, "
                               f"{self.free_pages(0)} free)")
        self._held = held

    def park(self, n_pages: int, tier: str | int) -> bool:
        """Park ``n_pages`` unkeyed pages in ``tier`` (a swapped-out request's KV), making
        room there by demoting / evicting cached pages; all or nothing."""
        t = self._t(tier)
        if n_pages < 0 or not self._room_for(n_pages, t):
            return False
        self._parked[t] += n_pages
        return True

    def unpark(self, n_pages: int, tier: str | int) -> None:
        t = self._t(tier)
        if not 0 <= n_pages <= self._parked[t]:
            raise RuntimeError(f"radix cache: cannot unpark {n_pages} pages "
                               f"({self._parked[t]} parked in {self.tiers[t].name})")
        self._parked[t] -= n_pages

    def check(self) -> None:
        """Assert the tree's invariants, then invariant 1 per tier (O(nodes))."""
        self.tree.check()
        for t, tier in enumerate(self.tiers):
            used = self.used_pages(t)
            if not 0 <= used <= self._cap[t] or used + self.free_pages(t) != self._cap[t] \
                    or self._held < 0 or self._parked[t] < 0:
                raise RuntimeError(f"radix invariant 1: tier {tier.name}: {used} used of "
                                   f"{self._cap[t]} ({self.tree.cached_pages(t)} cached, "
                                   f"{self._parked[t]} parked)")
