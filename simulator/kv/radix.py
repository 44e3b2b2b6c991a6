"""A radix tree of KV pages per worker, with memory tiers and speculative (tentative) pages.

The shape follows SGLang's radix cache (one structure, a small API): a key is a sequence of
page ids (an int per page-aligned block of tokens, e.g. 16 tokens); the tree stores every
cached prefix once, so requests and speculation-tree branches that share a prefix share its
nodes. Nodes are path-compressed (a node holds a run of pages) and children are a dict keyed
by the next page id, so every operation costs O(length of the key) plus O(log n) per victim.

Tiers are an ordered list, fastest first (HBM, host DRAM, remote DRAM over RDMA, storage),
each with a capacity in pages; a node lives wholly in one tier. Eviction either frees
unreferenced leaves (``evict``) or moves them one tier down (``demote``; a full lowest tier
frees); a hit on a lower tier is moved up by ``promote``, which returns the pages and bytes
moved and the transfer time (the caller charges it). Victims are chosen by a strategy
registered by name in ``RADIX_EVICTION`` (``lru`` by default, ``lfu``, ``priority``).

Besides cached pages, the top tier holds pages the structure does not key: tentative pages
(draft and verify tokens, ``reserve_tentative`` until ``commit_tentative`` or
``release_tentative``) and held pages (a running request's private pages,
``allocate`` / ``free``); both count against its capacity, so long drafts compete with
cached prefixes and batch size. Any tier may also hold parked pages (a swapped-out
request's KV, ``park`` / ``unpark``): unkeyed, counted against that tier's capacity.

Invariants (``RadixCache.check`` asserts 1, 3, 5 and 6; the tests check all of them):

1. Conservation: for every tier, pages in use (cached + parked + tentative + held) + free pages =
   capacity, and 0 <= in use <= capacity; the running counts equal a walk of the tree.
2. A locked node (one on the path of any ``lock``) is never evicted or demoted.
3. Reference counts: every node's count is >= 0 and >= the sum of its children's counts
   (``lock`` counts the node and every ancestor once).
4. ``evict(n)`` and ``demote(n)`` never free or move more than n pages (a victim leaf longer
   than what is left is split and only its tail goes); ``evict`` frees exactly
   min(n, evictable pages), ``demote`` moves min(n, unlocked pages) when the lower tier has
   room; ``insert`` after ``evict`` restores the matches.
5. Tier order: a node is never in a faster tier than its parent, so a match is a run of
   HBM pages, then host pages, and so on.
6. Structure: every non-root node has >= 1 page, is keyed in its parent's children by its
   first page, and points back to its parent.
7. ``match_prefix`` returns the longest cached prefix of the key (checked against a
   reference model of prefix -> tier in the property tests).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import count

from specsim.simulator.registry import RADIX_EVICTION

_MASK64 = (1 << 64) - 1


def _splitmix(z: int) -> int:
    z = (z + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def pages_from_block_ids(block_ids: Iterable[int], tokens: int, block_tokens: int = 512,
                         page_tokens: int = 16) -> list[int]:
    """Page ids for a prompt whose prefix is given as coarse block ids (Mooncake ``hash_ids``).

    Each block id expands deterministically into ``block_tokens / page_tokens`` page ids
    (a hash of (block id, position in block): Mooncake's ids already chain their prefix,
    so equal page ids mean equal prefixes). The result covers ``tokens`` tokens in full
    pages only (the last partial block is truncated to the prompt length, and a partial
    last page is not cacheable, as in vLLM and SGLang), and never more than the blocks.
    """
    if page_tokens <= 0 or block_tokens % page_tokens:
        raise ValueError(f"block_tokens ({block_tokens}) must be a multiple of page_tokens "
                         f"({page_tokens})")
    per = block_tokens // page_tokens
    ids = [int(b) for b in block_ids]
    n = min(len(ids) * per, max(int(tokens), 0) // page_tokens)
    out: list[int] = []
    for b in ids:
        base = _splitmix(b & _MASK64)
        for j in range(per):
            if len(out) >= n:
                return out
            out.append(_splitmix(base ^ j) >> 1)  # non-negative 63-bit ids
    return out


@dataclass(frozen=True)
class Tier:
    """One memory tier: capacity in pages; bandwidth and latency of moving pages between it
    and the tier above (a move between tiers a < b is charged at tier b's figures)."""

    name: str
    capacity_pages: int
    bandwidth_bytes_s: float = math.inf
    latency_s: float = 0.0


class TreeNode:
    """A run of pages in one tier; ``lock`` counts holders of this node or a descendant."""

    __slots__ = ("key", "parent", "children", "tier", "lock", "last_access", "hits",
                 "priority", "stamp")

    def __init__(self, key: tuple, parent: TreeNode | None, tier: int, now: int,
                 priority: float = 0) -> None:
        self.key = key
        self.parent = parent
        self.children: dict[int, TreeNode] = {}
        self.tier = tier
        self.lock = 0
        self.last_access = now
        self.hits = 0
        self.priority = priority
        self.stamp = 0  # bumped whenever the eviction key may change: stale heap entries

    @property
    def alive(self) -> bool:
        """False once evicted (the root, with no pages, is always alive)."""
        return self.parent is not None or not self.key

    def __repr__(self) -> str:
        return (f"TreeNode(pages={len(self.key)}, tier={self.tier}, lock={self.lock}, "
                f"children={len(self.children)})")


@dataclass
class MatchResult:
    """The longest cached prefix: its nodes (root excluded, top-down), the last one, how many
    pages matched, and how many of them are in each tier (index = tier order)."""

    nodes: list[TreeNode]
    last_node: TreeNode
    matched_pages: int
    pages_by_tier: list[int]
    page_tokens: int = 16

    @property
    def matched_tokens(self) -> int:
        return self.matched_pages * self.page_tokens


@dataclass
class PromoteResult:
    """What a promotion moved: pages and bytes in all, pages per source tier, and the
    transfer time (per source tier: its latency + bytes / its bandwidth, summed)."""

    pages: int = 0
    bytes: int = 0
    pages_by_source: dict[str, int] = field(default_factory=dict)
    transfer_s: float = 0.0


@dataclass
class Reservation:
    """Tentative pages reserved in the top tier (draft / verify tokens)."""

    pages: int
    open: bool = True


# --- eviction strategies: lowest key goes first ---------------------------------------

class RadixEvictionStrategy:
    """Interface: ``key(node)`` -> a sortable tuple; the unreferenced leaf with the lowest
    key is evicted (or demoted) first."""

    name = "radix_eviction"

    def key(self, node: TreeNode) -> tuple:
        raise NotImplementedError


@RADIX_EVICTION.register("lru")
class LRU(RadixEvictionStrategy):
    """Least recently used first (SGLang's and vLLM's default)."""

    def key(self, node):
        return (node.last_access,)


@RADIX_EVICTION.register("lfu")
class LFU(RadixEvictionStrategy):
    """Fewest hits first; ties: least recently used."""

    def key(self, node):
        return (node.hits, node.last_access)


@RADIX_EVICTION.register("priority")
class Priority(RadixEvictionStrategy):
    """Lowest priority first (the highest priority of the inserts through a node); ties:
    least recently used."""

    def key(self, node):
        return (node.priority, node.last_access)


# --- the tree ------------------------------------------------------------------------

class RadixCache:
    """One worker's KV pages: a radix tree over page ids, tiers, locks and tentative pages."""

    def __init__(self, tiers: Sequence[Tier] | int, *, page_tokens: int = 16,
                 page_bytes: int = 0, eviction: str | RadixEvictionStrategy = "lru",
                 demote_on_evict: bool = True) -> None:
        if isinstance(tiers, int):
            tiers = [Tier("hbm", tiers)]
        self.tiers: list[Tier] = list(tiers)
        if not self.tiers:
            raise ValueError("a radix cache needs at least one tier")
        names = [t.name for t in self.tiers]
        if len(set(names)) != len(names):
            raise ValueError(f"tier names must be unique: {names}")
        self._index = {n: i for i, n in enumerate(names)}
        self.page_tokens = int(page_tokens)
        self.page_bytes = int(page_bytes)
        self.strategy = (RADIX_EVICTION.get(eviction)() if isinstance(eviction, str)
                         else eviction)
        self.demote_on_evict = demote_on_evict
        n = len(self.tiers)
        self._cap = [int(t.capacity_pages) for t in self.tiers]
        self._cached = [0] * n
        self._locked = [0] * n  # cached pages on locked paths, per tier
        self._tentative = 0
        self._held = 0
        self._parked = [0] * n  # swapped-out KV parked in a tier (unkeyed)
        self._heaps: list[list] = [[] for _ in range(n)]
        self._seq = count()
        self._clock = 0
        self._nodes = 0
        self.root = TreeNode((), None, 0, 0)
        self.root.lock = 1  # never a victim
        z = dict.fromkeys(names, 0)
        pairs = {(a, b): 0 for a in names for b in names if a != b}
        self.stats = {
            "lookups": 0, "lookup_pages": 0, "miss_pages": 0,
            "hit_pages": dict(z), "hit_tokens": dict(z),
            "inserted_pages": 0, "rewritten_pages": 0,
            "evicted_pages": dict(z), "evicted_nodes": 0,
            "moved_pages": dict(pairs), "moved_bytes": dict(pairs),
            "tentative_reserved": 0, "tentative_committed": 0, "tentative_freed": 0,
        }

    # -- capacity ---------------------------------------------------------------------
    def _t(self, tier: str | int) -> int:
        if isinstance(tier, str):
            if tier not in self._index:
                raise ValueError(f"unknown tier {tier!r}; tiers: {list(self._index)}")
            return self._index[tier]
        if not 0 <= tier < len(self.tiers):
            raise ValueError(f"tier index {tier} out of range")
        return int(tier)

    def capacity(self, tier: str | int = 0) -> int:
        return self._cap[self._t(tier)]

    def cached_pages(self, tier: str | int = 0) -> int:
        return self._cached[self._t(tier)]

    def used_pages(self, tier: str | int = 0) -> int:
        t = self._t(tier)
        return (self._cached[t] + self._parked[t]
                + (self._tentative + self._held if t == 0 else 0))

    def free_pages(self, tier: str | int = 0) -> int:
        t = self._t(tier)
        return (self._cap[t] - self._cached[t] - self._parked[t]
                - (self._tentative + self._held if t == 0 else 0))

    def parked_pages(self, tier: str | int = 0) -> int:
        return self._parked[self._t(tier)]

    @property
    def tentative_pages(self) -> int:
        return self._tentative

    @property
    def held_pages(self) -> int:
        return self._held

    def pages_per_tier(self) -> dict[str, int]:
        """Pages in use per tier (cached and parked, plus tentative and held in the top
        tier)."""
        return {t.name: self.used_pages(i) for i, t in enumerate(self.tiers)}

    def evictable_pages(self, tier: str | int = 0) -> int:
        """Pages ``evict`` could free now in ``tier``: unlocked nodes whose whole subtree is
        in that tier (O(tree); for tests and reports)."""
        t = self._t(tier)
        order, stack = [], [self.root]
        while stack:  # parents before children; reversed below: children first
            nd = stack.pop()
            order.append(nd)
            stack.extend(nd.children.values())
        ok: dict[int, bool] = {}
        total = 0
        for nd in reversed(order):
            mine = (nd is not self.root and nd.tier == t and nd.lock == 0
                    and all(ok[id(c)] for c in nd.children.values()))
            ok[id(nd)] = mine
            total += len(nd.key) if mine else 0
        return total

    # -- heap of candidates -----------------------------------------------------------
    def _candidate(self, node: TreeNode, t: int) -> bool:
        if node.parent is None or node.tier != t or node.lock:
            return False
        for c in node.children.values():
            if c.tier == t:
                return False
        return True

    def _offer(self, node: TreeNode) -> None:
        if node.parent is None or node.lock:
            return
        t = node.tier
        for c in node.children.values():
            if c.tier == t:
                return
        heap = self._heaps[t]
        heapq.heappush(heap, (self.strategy.key(node), next(self._seq), node.stamp, node))
        if len(heap) > 4 * self._nodes + 1024:
            self._compact(t)

    def _compact(self, t: int) -> None:
        seen, keep = set(), []
        for e in self._heaps[t]:
            node = e[3]
            if e[2] == node.stamp and id(node) not in seen and self._candidate(node, t):
                seen.add(id(node))
                keep.append(e)
        heapq.heapify(keep)
        self._heaps[t] = keep

    # -- structure --------------------------------------------------------------------
    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _split(self, node: TreeNode, m: int) -> TreeNode:
        """Split ``node`` after its first m pages; the new upper node is returned and
        ``node`` keeps the tail (so references held by lockers stay valid)."""
        upper = TreeNode(node.key[:m], node.parent, node.tier, node.last_access, node.priority)
        upper.lock, upper.hits = node.lock, node.hits
        upper.children[node.key[m]] = node
        node.parent.children[node.key[0]] = upper
        node.key = node.key[m:]
        node.parent = upper
        self._nodes += 1
        return upper

    def _walk(self, key: tuple, split: bool) -> tuple[list[TreeNode], int]:
        node, i, n, path = self.root, 0, len(key), []
        while i < n:
            child = node.children.get(key[i])
            if child is None:
                break
            ck = child.key
            m = len(ck)
            if key[i:i + m] == ck:
                path.append(child)
                i += m
                node = child
                continue
            j, lim = 1, min(m, n - i)
            while j < lim and ck[j] == key[i + j]:
                j += 1
            if split:
                path.append(self._split(child, j))
            i += j
            break
        return path, i

    def _touch(self, path: list[TreeNode], hit: bool, priority=None) -> None:
        now = self._tick()
        for nd in path:
            nd.last_access = now
            if hit:
                nd.hits += 1
            if priority is not None and priority > nd.priority:
                nd.priority = priority
            nd.stamp += 1
            self._offer(nd)  # the new key (stale entries are skipped)

    # -- public API -------------------------------------------------------------------
    def match_prefix(self, pages: Sequence[int], *, touch: bool = True) -> MatchResult:
        """The longest cached prefix of ``pages`` (all tiers). With ``touch`` (a request's
        lookup) it refreshes the eviction keys, counts hits per tier and splits a node the
        match ends inside, so ``last_node`` ends exactly at the match; without (a router's
        peek) nothing changes and a match ending inside a node counts those pages but
        ``last_node`` is the deepest whole node."""
        key = tuple(pages)
        path, i = self._walk(key, split=touch)
        by_tier = [0] * len(self.tiers)
        whole = 0
        for nd in path:
            by_tier[nd.tier] += len(nd.key)
            whole += len(nd.key)
        if not touch and whole < i:  # peek: a partial last node is counted, not returned
            child = (path[-1] if path else self.root).children[key[whole]]
            by_tier[child.tier] += i - whole
        if touch:
            self._touch(path, hit=True)
            s = self.stats
            s["lookups"] += 1
            s["lookup_pages"] += len(key)
            s["miss_pages"] += len(key) - i
            for t, p in enumerate(by_tier):
                if p:
                    name = self.tiers[t].name
                    s["hit_pages"][name] += p
                    s["hit_tokens"][name] += p * self.page_tokens
        last = path[-1] if path else self.root
        return MatchResult(path, last, i, by_tier, self.page_tokens)

    def insert(self, pages: Sequence[int], tier: str | int = 0, *, priority=None,
               make_room: bool = True) -> int:
        """Cache ``pages`` (a key from the root) in ``tier``; returns the new pages added.

        Pages of the key already cached in a slower tier are rewritten into ``tier`` (the
        caller computed them there; no transfer is counted). With ``make_room`` the room
        comes from evicting / demoting unreferenced pages (never the key's own prefix);
        what still does not fit is not inserted (a shorter prefix is cached)."""
        t = self._t(tier)
        key = tuple(pages)
        path, i = self._walk(key, split=True)
        self._touch(path, hit=False, priority=priority)
        last = path[-1] if path else self.root
        low = [nd for nd in path if nd.tier > t]
        need = sum(len(nd.key) for nd in low) + len(key) - i
        if need == 0:
            return 0
        if make_room and self.free_pages(t) < need:
            self._lock(last)
            try:
                self._make_room(t, need)
            finally:
                self._unlock(last)
        for nd in low:
            room = self.free_pages(t)
            if room <= 0:
                return 0
            if len(nd.key) > room:
                self._move(self._split(nd, room), t, transfer=False)
                return 0
            self._move(nd, t, transfer=False)
        add = min(len(key) - i, self.free_pages(t))
        if add <= 0:
            return 0
        leaf = TreeNode(key[i:i + add], last, t, self._clock,
                        0 if priority is None else priority)
        last.children[key[i]] = leaf
        self._nodes += 1
        self._cached[t] += add
        self.stats["inserted_pages"] += add
        self._offer(leaf)
        return add

    def lock(self, node: TreeNode | MatchResult) -> TreeNode:
        """Reference ``node`` and its ancestors: none of them is evicted or demoted while
        the count is > 0. Returns the node (for ``unlock``)."""
        node = node.last_node if isinstance(node, MatchResult) else node
        if node is not self.root and node.parent is None:
            raise RuntimeError("radix cache: cannot lock an evicted node")
        self._lock(node)
        return node

    def unlock(self, node: TreeNode | MatchResult) -> None:
        node = node.last_node if isinstance(node, MatchResult) else node
        if node.lock <= (1 if node is self.root else 0):
            raise RuntimeError(f"radix cache: unlock of an unlocked node ({node!r})")
        self._unlock(node)

    def _lock(self, node: TreeNode) -> None:
        while node is not None:
            if node.lock == 0:
                self._locked[node.tier] += len(node.key)
            node.lock += 1
            node = node.parent

    def _unlock(self, node: TreeNode) -> None:
        while node is not None:
            node.lock -= 1
            if node.lock == 0:
                self._locked[node.tier] -= len(node.key)
                self._offer(node)
            node = node.parent

    def locked_pages(self, tier: str | int = 0) -> int:
        """Cached pages on locked paths in ``tier`` (never evicted or demoted)."""
        return self._locked[self._t(tier)]

    def evict(self, n_pages: int, tier: str | int = 0) -> int:
        """Free up to ``n_pages`` pages of unreferenced leaves in ``tier``, lowest strategy
        key first; a leaf longer than what is left to free gives up only its tail. Returns
        the pages freed (= min(n_pages, evictable pages))."""
        t = self._t(tier)
        heap, freed, stash = self._heaps[t], 0, []
        while freed < n_pages and heap:
            entry = heapq.heappop(heap)
            node = entry[3]
            if entry[2] != node.stamp or not self._candidate(node, t):
                continue
            if node.children:  # children in slower tiers: demotable, not freeable
                stash.append(entry)
                continue
            need = n_pages - freed
            if len(node.key) > need:
                self._split(node, len(node.key) - need)
            freed += self._remove_leaf(node)
        for e in stash:
            heapq.heappush(heap, e)
        return freed

    def _remove_leaf(self, node: TreeNode) -> int:
        p, t, parent = len(node.key), node.tier, node.parent
        del parent.children[node.key[0]]
        node.parent = None
        node.stamp += 1
        self._nodes -= 1
        self._cached[t] -= p
        self.stats["evicted_pages"][self.tiers[t].name] += p
        self.stats["evicted_nodes"] += 1
        self._offer(parent)
        return p

    def _move(self, node: TreeNode, to: int, transfer: bool) -> None:
        src, p = node.tier, len(node.key)
        self._cached[src] -= p
        self._cached[to] += p
        if node.lock:
            self._locked[src] -= p
            self._locked[to] += p
        node.tier = to
        node.stamp += 1
        if transfer:
            pair = (self.tiers[src].name, self.tiers[to].name)
            self.stats["moved_pages"][pair] += p
            self.stats["moved_bytes"][pair] += p * self.page_bytes
        else:
            self.stats["rewritten_pages"] += p
        self._offer(node)
        self._offer(node.parent)

    def demote(self, n_pages: int, from_tier: str | int = 0,
               to_tier: str | int | None = None) -> int:
        """Move up to ``n_pages`` unreferenced pages from ``from_tier`` down to ``to_tier``
        (the next tier by default), lowest strategy key first, making room there by
        demoting further (or freeing, in the lowest tier). Returns the pages moved."""
        f = self._t(from_tier)
        to = f + 1 if to_tier is None else self._t(to_tier)
        if to <= f:
            raise ValueError(f"demote goes down the tiers: {from_tier!r} -> {to_tier!r}")
        want = min(n_pages, self._cached[f] - self._locked[f])
        if want <= 0:
            return 0
        if self.free_pages(to) < want:  # once, up front: never frees what this call moves
            self._make_room(to, want)
        heap, moved, stash = self._heaps[f], 0, []
        while moved < n_pages and heap:
            entry = heapq.heappop(heap)
            node = entry[3]
            if entry[2] != node.stamp or not self._candidate(node, f):
                continue
            if any(c.tier < to for c in node.children.values()):
                stash.append(entry)  # would sit below a child: not with this target
                continue
            room = min(n_pages - moved, len(node.key), self.free_pages(to))
            if room <= 0:
                stash.append(entry)
                break
            if len(node.key) > room:
                self._split(node, len(node.key) - room)
            self._move(node, to, transfer=True)
            moved += room
        for e in stash:
            heapq.heappush(heap, e)
        return moved

    def _make_room(self, t: int, need: int) -> bool:
        deficit = need - self.free_pages(t)
        if deficit <= 0:
            return True
        if self.demote_on_evict and t + 1 < len(self.tiers):
            deficit -= self.demote(deficit, t, t + 1)
        if deficit > 0:
            deficit -= self.evict(deficit, t)
        return deficit <= 0

    def make_room(self, n_pages: int, tier: str | int = 0) -> bool:
        """Evict / demote until ``n_pages`` are free in ``tier`` (best effort: False if
        locks prevent it, after freeing what it could)."""
        return self._make_room(self._t(tier), n_pages)

    def _room_for(self, n_pages: int, t: int = 0) -> bool:
        """All or nothing in tier ``t``: nothing is evicted when even every unlocked
        page would not be enough."""
        if n_pages - self.free_pages(t) > self._cached[t] - self._locked[t]:
            return False
        return self._make_room(t, n_pages)

    def path(self, node: TreeNode | MatchResult) -> list[TreeNode]:
        """The nodes from the root (excluded) down to ``node``."""
        node = node.last_node if isinstance(node, MatchResult) else node
        out = []
        while node is not None and node is not self.root:
            out.append(node)
            node = node.parent
        return out[::-1]

    def promote(self, node: TreeNode | MatchResult, to_tier: str | int = 0) -> PromoteResult:
        """Move the path down to ``node`` up into ``to_tier`` (making room there), top-down;
        what does not fit stays where it is. Returns the pages and bytes moved and the
        transfer time; the caller charges it (and decides what overlaps compute)."""
        to = self._t(to_tier)
        node = node.last_node if isinstance(node, MatchResult) else node
        res = PromoteResult()
        low = [nd for nd in self.path(node) if nd.tier > to]
        need = sum(len(nd.key) for nd in low)
        if need == 0:
            return res
        src_pages = [0] * len(self.tiers)
        self._lock(node)
        try:
            self._make_room(to, need)
            for nd in low:
                room = self.free_pages(to)
                if room <= 0:
                    break
                if len(nd.key) > room:
                    nd = self._split(nd, room)
                src_pages[nd.tier] += len(nd.key)
                self._move(nd, to, transfer=True)
        finally:
            self._unlock(node)
        for s, p in enumerate(src_pages):
            if p:
                tier, b = self.tiers[s], p * self.page_bytes
                res.pages += p
                res.bytes += b
                res.pages_by_source[tier.name] = p
                res.transfer_s += tier.latency_s + (b / tier.bandwidth_bytes_s if b else 0.0)
        return res

    # -- tentative (speculative) and held pages ---------------------------------------
    def reserve_tentative(self, n_pages: int) -> Reservation | None:
        """Reserve ``n_pages`` top-tier pages for draft / verify tokens (making room);
        None when locks leave no room."""
        if n_pages < 0:
            raise ValueError("negative reservation")
        if not self._room_for(n_pages):
            return None
        self._tentative += n_pages
        self.stats["tentative_reserved"] += n_pages
        return Reservation(n_pages)

    def _close(self, res: Reservation) -> None:
        if not res.open:
            raise RuntimeError("radix cache: reservation already committed or released")
        res.open = False
        self._tentative -= res.pages

    def commit_tentative(self, res: Reservation, accepted: int | Sequence[int]) -> int:
        """Keep the accepted part of a reservation and free the rest. ``accepted`` is a page
        count (they become held pages of the request) or a key from the root (its new pages
        are inserted into the tree, taking the reservation's room first). Returns the pages
        committed."""
        if isinstance(accepted, int):
            if not 0 <= accepted <= res.pages:
                raise ValueError(f"accepted {accepted} of a {res.pages}-page reservation")
            self._close(res)
            self._held += accepted
            committed = accepted
        else:
            self._close(res)
            committed = self.insert(accepted, 0)
        self.stats["tentative_committed"] += committed
        self.stats["tentative_freed"] += max(res.pages - committed, 0)
        return committed

    def release_tentative(self, res: Reservation) -> int:
        """Free a whole reservation (all drafts rejected, or the request preempted)."""
        self._close(res)
        self.stats["tentative_freed"] += res.pages
        return res.pages

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

    def distinct_new_pages(self, keys: Iterable[Sequence[int]]) -> int:
        """Pages needed to hold all ``keys`` (e.g. a draft tree's branches): pages shared by
        several keys count once, pages already cached count zero. Read-only."""
        trie: dict = {}
        new = 0
        for k in keys:
            k = tuple(k)
            have = self._walk(k, split=False)[1]
            node = trie
            for j, p in enumerate(k):
                nxt = node.get(p)
                if nxt is None:
                    nxt = node[p] = {}
                    if j >= have:
                        new += 1
                node = nxt
        return new

    # -- inspection -------------------------------------------------------------------
    def snapshot(self) -> dict[tuple, str]:
        """Every cached prefix -> its tier name (O(pages x depth): for tests)."""
        out: dict[tuple, str] = {}
        stack = [(self.root, ())]
        while stack:
            node, prefix = stack.pop()
            for c in node.children.values():
                p = prefix
                for page in c.key:
                    p = p + (page,)
                    out[p] = self.tiers[c.tier].name
                stack.append((c, p))
        return out

    def counters(self) -> dict[str, int | float]:
        """Flat counters for metrics: pages per tier, hits per tier (pages and tokens),
        pages and bytes moved per tier pair, evictions, tentative pages."""
        s = self.stats
        out: dict[str, int | float] = {k: s[k] for k in (
            "lookups", "lookup_pages", "miss_pages", "inserted_pages", "rewritten_pages",
            "evicted_nodes", "tentative_reserved", "tentative_committed", "tentative_freed")}
        for name, p in self.pages_per_tier().items():
            out[f"pages_{name}"] = p
        for k in ("hit_pages", "hit_tokens", "evicted_pages"):
            for name, v in s[k].items():
                out[f"{k}_{name}"] = v
        for k in ("moved_pages", "moved_bytes"):
            for (a, b), v in s[k].items():
                if v:
                    out[f"{k}_{a}_to_{b}"] = v
        return out

    def check(self) -> None:
        """Assert invariants 1, 3, 5 and 6 by walking the tree (O(nodes))."""
        cached = [0] * len(self.tiers)
        locked = [0] * len(self.tiers)
        stack = [self.root]
        nodes = 0
        while stack:
            nd = stack.pop()
            below = 0
            for k, c in nd.children.items():
                if c.parent is not nd or not c.key or c.key[0] != k:
                    raise RuntimeError(f"radix invariant 6: malformed node {c!r}")
                if nd is not self.root and c.tier < nd.tier:
                    raise RuntimeError(f"radix invariant 5: {c!r} faster than its parent")
                if c.lock < 0:
                    raise RuntimeError(f"radix invariant 3: negative count at {c!r}")
                below += c.lock
                cached[c.tier] += len(c.key)
                locked[c.tier] += len(c.key) if c.lock else 0
                nodes += 1
                stack.append(c)
            if nd.lock < below:
                raise RuntimeError(f"radix invariant 3: {nd!r} count below its children's")
        if locked != self._locked:
            raise RuntimeError(f"radix invariant 3: locked pages {locked}, counted "
                               f"{self._locked}")
        if nodes != self._nodes:
            raise RuntimeError(f"radix invariant 6: {nodes} nodes, counted {self._nodes}")
        for t, tier in enumerate(self.tiers):
            used = self.used_pages(t)
            if cached[t] != self._cached[t] or not 0 <= used <= self._cap[t] \
                    or used + self.free_pages(t) != self._cap[t] \
                    or self._tentative < 0 or self._held < 0 or self._parked[t] < 0:
                raise RuntimeError(f"radix invariant 1: tier {tier.name}: {cached[t]} cached "
                                   f"(counted {self._cached[t]}), {used} used of "
                                   f"{self._cap[t]}")
