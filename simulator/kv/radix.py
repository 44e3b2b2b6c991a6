"""A radix tree of KV pages per worker: match, insert, lock and evict (SGLang's radix cache).

One structure, a small API, as in SGLang's ``radix_cache.py``: a key is a sequence of page
ids (an int per page-aligned block of tokens, e.g. 16 tokens); the tree stores every cached
prefix once, so requests that share a prefix share its nodes. Nodes are path-compressed (a
node holds a run of pages) and children are a dict keyed by the next page id, so every
operation costs O(length of the key) plus O(log n) per victim.

A node lives wholly in one memory tier (an index, fastest first); the tree counts its cached
and locked pages per tier and keeps, per tier, the eviction order of its unlocked leaves
(a strategy registered by name in ``RADIX_EVICTION``: ``lru`` by default, ``lfu``,
``priority``). Everything else about memory (capacities, the pages outside the tree, moving
pages between tiers, making room) is the tier store's (``simulator/kv/tiers.py``), which the
tree asks for room when it inserts (``pool``).

Invariants (``RadixCache.check`` asserts 3, 5 and 6 and the running counts; ``TierStore.check``
adds 1; the tests check all of them):

1. Conservation: for every tier, pages in use (cached + parked + held) + free pages =
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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import count
from typing import Literal, Protocol

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


class Pool(Protocol):
    """What the tree asks of the memory behind it when it inserts (``TierStore``)."""

    def free_pages(self, tier: int) -> int: ...

    def make_room(self, n_pages: int, tier: int) -> bool: ...


#: what a visitor of ``RadixCache.victims`` did with a node: "used" (evicted or moved it),
#: "skip" (it stays a candidate; go on), "stop" (it stays a candidate; stop), "done" (used;
#: stop)
Verdict = Literal["used", "skip", "stop", "done"]


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
    """One worker's radix tree over page ids: match, insert, lock, evict; per tier, its
    cached and locked pages and the eviction order of its unlocked leaves."""

    def __init__(self, tier_names: Sequence[str], pool: Pool, *, page_tokens: int = 16,
                 eviction: str | RadixEvictionStrategy = "lru") -> None:
        self.tier_names = list(tier_names)
        self._index = {n: i for i, n in enumerate(self.tier_names)}
        self.pool = pool
        self.page_tokens = int(page_tokens)
        self.strategy = (RADIX_EVICTION.get(eviction)() if isinstance(eviction, str)
                         else eviction)
        n = len(self.tier_names)
        self._cached = [0] * n
        self._locked = [0] * n  # cached pages on locked paths, per tier
        self._heaps: list[list] = [[] for _ in range(n)]
        self._seq = count()
        self._clock = 0
        self._nodes = 0
        self.root = TreeNode((), None, 0, 0)
        self.root.lock = 1  # never a victim
        z = dict.fromkeys(self.tier_names, 0)
        self.stats = {
            "lookups": 0, "lookup_pages": 0, "miss_pages": 0,
            "hit_pages": dict(z), "hit_tokens": dict(z),
            "inserted_pages": 0, "rewritten_pages": 0,
            "evicted_pages": dict(z), "evicted_nodes": 0,
        }

    def tier(self, tier: str | int) -> int:
        """A tier's index from its name or index."""
        if isinstance(tier, str):
            if tier not in self._index:
                raise ValueError(f"unknown tier {tier!r}; tiers: {list(self._index)}")
            return self._index[tier]
        if not 0 <= tier < len(self.tier_names):
            raise ValueError(f"tier index {tier} out of range")
        return int(tier)

    def cached_pages(self, tier: str | int = 0) -> int:
        return self._cached[self.tier(tier)]

    def locked_pages(self, tier: str | int = 0) -> int:
        """Cached pages on locked paths in ``tier`` (never evicted or demoted)."""
        return self._locked[self.tier(tier)]

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

    def victims(self, tier: int, visit: Callable[[TreeNode], Verdict]) -> None:
        """Offer ``tier``'s unlocked nodes with no child in that tier to ``visit``, lowest
        strategy key first, until it stops or none is left (see ``Verdict``)."""
        heap, stash = self._heaps[tier], []
        while heap:
            entry = heapq.heappop(heap)
            node = entry[3]
            if entry[2] != node.stamp or not self._candidate(node, tier):
                continue
            verdict = visit(node)
            if verdict in ("skip", "stop"):
                stash.append(entry)
            if verdict in ("stop", "done"):
                break
        for e in stash:
            heapq.heappush(heap, e)

    # -- structure --------------------------------------------------------------------
    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def split(self, node: TreeNode, m: int) -> TreeNode:
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

    def retier(self, node: TreeNode, to: int) -> None:
        """Put ``node``'s pages in tier ``to`` (the tier store counts a transfer)."""
        src, p = node.tier, len(node.key)
        self._cached[src] -= p
        self._cached[to] += p
        if node.lock:
            self._locked[src] -= p
            self._locked[to] += p
        node.tier = to
        node.stamp += 1
        self._offer(node)
        self._offer(node.parent)

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
                path.append(self.split(child, j))
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
        by_tier = [0] * len(self.tier_names)
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
                    name = self.tier_names[t]
                    s["hit_pages"][name] += p
                    s["hit_tokens"][name] += p * self.page_tokens
        last = path[-1] if path else self.root
        return MatchResult(path, last, i, by_tier)

    def insert(self, pages: Sequence[int], tier: str | int = 0, *, priority=None,
               make_room: bool = True) -> int:
        """Cache ``pages`` (a key from the root) in ``tier``; returns the new pages added.

        Pages of the key already cached in a slower tier are rewritten into ``tier`` (the
        caller computed them there; no transfer is counted). With ``make_room`` the pool
        makes room (never from the key's own prefix: it is locked meanwhile); what still
        does not fit is not inserted (a shorter prefix is cached)."""
        t = self.tier(tier)
        key = tuple(pages)
        path, i = self._walk(key, split=True)
        self._touch(path, hit=False, priority=priority)
        last = path[-1] if path else self.root
        low = [nd for nd in path if nd.tier > t]
        need = sum(len(nd.key) for nd in low) + len(key) - i
        if need == 0:
            return 0
        pool = self.pool
        if make_room and pool.free_pages(t) < need:
            self._lock(last)
            try:
                pool.make_room(need, t)
            finally:
                self._unlock(last)
        for nd in low:
            room = pool.free_pages(t)
            if room <= 0:
                return 0
            if len(nd.key) > room:
                nd = self.split(nd, room)
                self.stats["rewritten_pages"] += len(nd.key)
                self.retier(nd, t)
                return 0
            self.stats["rewritten_pages"] += len(nd.key)
            self.retier(nd, t)
        add = min(len(key) - i, pool.free_pages(t))
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

    def evict(self, n_pages: int, tier: str | int = 0) -> int:
        """Free up to ``n_pages`` pages of unreferenced leaves in ``tier``, lowest strategy
        key first; a leaf longer than what is left to free gives up only its tail. Returns
        the pages freed (= min(n_pages, evictable pages))."""
        t = self.tier(tier)
        freed = 0
        if n_pages <= 0:
            return 0

        def visit(node: TreeNode) -> Verdict:
            nonlocal freed
            if node.children:  # children in slower tiers: demotable, not freeable
                return "skip"
            need = n_pages - freed
            if len(node.key) > need:
                self.split(node, len(node.key) - need)
            freed += self._remove_leaf(node)
            return "done" if freed >= n_pages else "used"

        self.victims(t, visit)
        return freed

    def _remove_leaf(self, node: TreeNode) -> int:
        p, t, parent = len(node.key), node.tier, node.parent
        del parent.children[node.key[0]]
        node.parent = None
        node.stamp += 1
        self._nodes -= 1
        self._cached[t] -= p
        self.stats["evicted_pages"][self.tier_names[t]] += p
        self.stats["evicted_nodes"] += 1
        self._offer(parent)
        return p

    def path(self, node: TreeNode | MatchResult) -> list[TreeNode]:
        """The nodes from the root (excluded) down to ``node``."""
        node = node.last_node if isinstance(node, MatchResult) else node
        out = []
        while node is not None and node is not self.root:
            out.append(node)
            node = node.parent
        return out[::-1]

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
                    out[p] = self.tier_names[c.tier]
                stack.append((c, p))
        return out

    def check(self) -> None:
        """Assert invariants 3, 5 and 6 and the running counts by walking the tree
        (O(nodes))."""
        cached = [0] * len(self.tier_names)
        locked = [0] * len(self.tier_names)
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
        if cached != self._cached:
            raise RuntimeError(f"radix invariant 1: cached pages {cached}, counted "
                               f"{self._cached}")
