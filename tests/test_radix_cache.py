"""The radix KV cache (simulator/kv/radix.py: the tree; simulator/kv/tiers.py: the tier
store): unit tests and hypothesis property tests of the numbered invariants against a
reference model (a dict of cached prefix -> tier)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specsim.errors import ScenarioError
from specsim.simulator.kv.radix import (
    LFU,
    LRU,
    MatchResult,
    Priority,
    RadixCache,
    pages_from_block_ids,
)
from specsim.simulator.kv.tiers import Tier, TierStore
from specsim.simulator.registry import RADIX_EVICTION

PAGE_BYTES = 2 * 36 * 8 * 128 * 2 * 16  # K+V x layers x kv heads x head dim x bf16 x 16 tokens


def two_tiers(hbm=4, host=8, **kw) -> TierStore:
    return TierStore([Tier("hbm", hbm), Tier("host", host, 50e9, 10e-6)],
                     page_bytes=PAGE_BYTES, **kw)


# --- unit tests ------------------------------------------------------------------------

def test_mooncake_blocks_expand_to_pages():
    pages = pages_from_block_ids([7], 512)
    assert len(pages) == 32 and len(set(pages)) == 32
    assert all(0 <= p < 2**63 for p in pages)
    assert pages == pages_from_block_ids([7], 512)  # deterministic
    two = pages_from_block_ids([7, 9], 1024)
    assert len(two) == 64 and two[:32] == pages  # a shared block is a shared run of pages
    assert set(two[32:]).isdisjoint(pages_from_block_ids([8, 10], 1024))
    # the last partial block is truncated to the prompt (full pages only)
    assert len(pages_from_block_ids([7, 9], 700)) == 700 // 16
    assert pages_from_block_ids([7, 9], 700) == two[:43]
    assert len(pages_from_block_ids([7], 5000)) == 32  # never more than the blocks cover
    assert len(pages_from_block_ids([7, 9], 1024, block_tokens=512, page_tokens=32)) == 32
    with pytest.raises(ValueError):
        pages_from_block_ids([1], 512, block_tokens=500, page_tokens=16)


def test_registry_holds_the_strategies():
    assert {"lru", "lfu", "priority"} <= set(RADIX_EVICTION.names())
    assert RADIX_EVICTION.get("lru") is LRU and RADIX_EVICTION.get("lfu") is LFU
    assert RADIX_EVICTION.get("priority") is Priority
    with pytest.raises(ScenarioError, match="kv_cache.eviction"):
        TierStore(8, eviction="nope")


def test_match_insert_share_prefix_nodes():
    c = TierStore(100)
    assert c.tree.insert([1, 2, 3, 4]) == 4
    assert c.tree.insert([1, 2, 9]) == 1  # shares [1, 2]
    assert c.used_pages() == 5
    m = c.tree.match_prefix([1, 2, 3, 7])
    assert (m.matched_pages, m.pages_by_tier) == (3, [3])
    assert [len(n.key) for n in m.nodes] == [2, 1]  # split where the match ended
    assert c.tree.match_prefix([5]).matched_pages == 0
    assert c.tree.stats["hit_pages"]["hbm"] == 3 and c.tree.stats["miss_pages"] == 2
    c.check()


def test_peek_changes_nothing():
    c = TierStore(100)
    c.tree.insert([1, 2, 3, 4])
    before = (c.tree.stats["lookups"], c.tree.root.children[1].last_access)
    m = c.tree.match_prefix([1, 2, 9], touch=False)
    assert m.matched_pages == 2 and m.last_node is c.tree.root and m.pages_by_tier == [2]
    assert len(c.tree.root.children[1].key) == 4  # not split
    assert (c.tree.stats["lookups"], c.tree.root.children[1].last_access) == before


def test_lru_and_lfu_evict_different_leaves():
    def run(strategy):
        c = TierStore(6, eviction=strategy)
        c.tree.insert([1, 1, 1])
        c.tree.insert([2, 2, 2])
        for _ in range(3):
            c.tree.match_prefix([1, 1, 1])  # A: used often, but long ago
        c.tree.match_prefix([2, 2, 2])  # B: used once, most recently
        assert c.tree.evict(3) == 3
        c.check()
        return c.tree.match_prefix([1, 1, 1]).matched_pages, c.tree.match_prefix([2, 2, 2]).matched_pages

    assert run("lru") == (0, 3)  # the least recent (A) goes
    assert run("lfu") == (3, 0)  # the least frequent (B) goes


def test_priority_evicts_low_priority_first_then_lru():
    c = TierStore(9, eviction="priority")
    c.tree.insert([1, 1, 1], priority=5)
    c.tree.insert([2, 2, 2], priority=0)
    c.tree.insert([3, 3, 3], priority=0)
    c.tree.match_prefix([2, 2, 2])  # among priority 0, 3 is now the least recent
    assert c.tree.evict(3) == 3 and c.tree.match_prefix([3, 3, 3]).matched_pages == 0
    assert c.tree.evict(3) == 3 and c.tree.match_prefix([2, 2, 2]).matched_pages == 0
    assert c.tree.match_prefix([1, 1, 1]).matched_pages == 3


def test_evict_frees_exactly_what_is_asked_tail_first_and_insert_restores():
    c = TierStore(20)
    key = list(range(10))
    c.tree.insert(key)
    assert c.tree.evict(3) == 3  # the leaf is split: only its tail goes
    assert c.tree.match_prefix(key).matched_pages == 7 and c.free_pages() == 13
    assert c.tree.evict(100) == 7 and c.used_pages() == 0
    assert c.tree.evict(5) == 0
    assert c.tree.insert(key) == 10 and c.tree.match_prefix(key).matched_pages == 10
    assert c.tree.stats["evicted_pages"]["hbm"] == 10
    c.check()


def test_locked_nodes_are_never_evicted_or_demoted():
    c = two_tiers(hbm=6, host=6)
    c.tree.insert([1, 2, 3])
    c.tree.insert([4, 5, 6])
    node = c.tree.lock(c.tree.match_prefix([1, 2, 3]))
    assert c.demote(6) == 3 and c.tree.evict(6, "hbm") == 0
    assert c.tree.match_prefix([1, 2, 3]).pages_by_tier == [3, 0]
    assert c.tree.match_prefix([4, 5, 6]).pages_by_tier == [0, 3]
    assert c.tree.evict(6, "host") == 3
    c.tree.unlock(node)
    assert c.tree.evict(6) == 3 and c.used_pages() == 0
    with pytest.raises(RuntimeError, match="unlocked"):
        c.tree.unlock(node)
    with pytest.raises(RuntimeError, match="evicted"):
        c.tree.lock(node)
    c.check()


def test_insert_makes_room_by_demoting_and_a_hit_promotes_with_bytes():
    c = two_tiers(hbm=4, host=8)
    a, b = [1, 2, 3, 4], [5, 6, 7, 8]
    c.tree.insert(a)
    assert c.tree.insert(b) == 4  # A (least recent) is demoted to host to make room
    m = c.tree.match_prefix(a)
    assert m.matched_pages == 4 and m.pages_by_tier == [0, 4]
    assert c.tree.stats["hit_pages"] == {"hbm": 0, "host": 4}
    assert c.tree.stats["hit_tokens"]["host"] == 64
    res = c.promote(m)
    assert res.pages == 4 and res.bytes == 4 * PAGE_BYTES
    assert res.pages_by_source == {"host": 4}
    assert res.transfer_s == pytest.approx(10e-6 + 4 * PAGE_BYTES / 50e9)
    assert c.tree.match_prefix(a).pages_by_tier == [4, 0]
    assert c.tree.match_prefix(b).pages_by_tier == [0, 4]  # B made room for A
    assert c.stats["moved_bytes"][("host", "hbm")] == 4 * PAGE_BYTES
    assert c.stats["moved_bytes"][("hbm", "host")] == 8 * PAGE_BYTES
    assert c.stats["moved_pages"][("host", "hbm")] == 4
    assert c.promote(c.tree.match_prefix(a)).pages == 0  # already there
    c.check()


def test_partial_promotion_keeps_tier_order():
    c = TierStore([Tier("hbm", 4), Tier("host", 10, 1e9)], page_bytes=10)
    c.tree.insert(list(range(8)), "host")
    c.tree.insert([50, 51])
    c.tree.lock(c.tree.match_prefix([50, 51]))  # 2 HBM pages pinned; 2 free
    res = c.promote(c.tree.match_prefix(list(range(8))))
    assert res.pages == 2 and res.bytes == 20  # only 2 HBM pages were free
    assert c.tree.match_prefix(list(range(8))).pages_by_tier == [2, 6]
    c.check()


def test_full_lowest_tier_frees_and_three_tiers_cascade():
    c = TierStore([Tier("hbm", 2), Tier("host", 2), Tier("storage", 2)])
    for k in ([1, 1], [2, 2], [3, 3], [4, 4]):
        assert c.tree.insert(k) == 2
        c.check()
    snap = c.tree.snapshot()
    assert snap[(4, 4)] == "hbm" and snap[(3, 3)] == "host" and snap[(2, 2)] == "storage"
    assert (1, 1) not in snap  # the full lowest tier freed the oldest
    assert c.tree.stats["evicted_pages"]["storage"] == 2
    assert [c.used_pages(n) for n in ("hbm", "host", "storage")] == [2, 2, 2]


def test_the_tree_asks_its_pool_for_room():
    """The tree holds no capacities: an insert takes what its pool says is free, after
    asking it once to make room (the key's own prefix locked meanwhile)."""

    class Pool:
        def __init__(self):
            self.calls = []

        def free_pages(self, tier):
            return 3

        def make_room(self, n_pages, tier):
            self.calls.append((n_pages, tier, tree.locked_pages(tier)))
            return False

    pool = Pool()
    tree = RadixCache(["hbm"], pool)
    assert tree.insert([1, 2]) == 2 and pool.calls == []
    assert tree.insert([1, 2, 3, 4, 5, 6]) == 3 and pool.calls == [(4, 0, 2)]
    assert tree.locked_pages(0) == 0 and tree.match_prefix([1, 2, 3, 4, 5, 6]).matched_pages == 5
    tree.check()


# --- property tests against a reference model -------------------------------------------

# keys: mostly prefixes of a few sequences that share prefixes (so matches end inside
# nodes, branch, and split), sometimes any short sequence
BASES = [(0, 1, 2, 3, 0, 1), (0, 1, 2, 1, 1, 0), (0, 2, 3, 3, 1, 2), (1, 0, 0, 2, 3, 1),
         (2, 2, 2, 2, 2, 2)]
KEY = st.one_of(
    st.tuples(st.sampled_from(BASES), st.integers(1, 6)).map(lambda bn: list(bn[0][:bn[1]])),
    st.lists(st.integers(0, 3), min_size=1, max_size=6))
OPS = st.lists(st.one_of(
    st.tuples(st.just("insert"), KEY, st.integers(0, 2), st.integers(0, 2)),
    st.tuples(st.just("match"), KEY),
    st.tuples(st.just("peek"), KEY),
    st.tuples(st.just("lock"), KEY),
    st.tuples(st.just("unlock"), st.integers(0, 10)),
    st.tuples(st.just("evict"), st.integers(0, 8), st.integers(0, 2)),
    st.tuples(st.just("demote"), st.integers(0, 8), st.integers(0, 1)),
    st.tuples(st.just("promote"), KEY),
    st.tuples(st.just("hold"), st.integers(-4, 4)),
), max_size=40)


def longest(model: dict, key) -> int:
    n = 0
    while n < len(key) and tuple(key[:n + 1]) in model:
        n += 1
    return n


class Model:
    """Reference: cached prefix -> tier index, locked paths, held pages."""

    def __init__(self, cache: TierStore):
        self.cache = cache
        self.prefixes: dict[tuple, int] = {}
        self.locks: list[tuple] = []  # (node, locked prefix)
        self.held = 0

    def locked(self) -> set:
        return {p[:i] for _, p in self.locks for i in range(1, len(p) + 1)}

    def snap(self) -> dict[tuple, int]:
        return {p: self.cache._t(t) for p, t in self.cache.tree.snapshot().items()}

    def transition(self, after: dict, *, raised=frozenset(), new=frozenset()) -> None:
        """What may happen besides the op itself: unlocked prefixes leave or go down."""
        before, locked = self.prefixes, self.locked()
        for p in set(before) - set(after):
            assert p not in locked, f"invariant 2: locked {p} evicted"
        for p, t in after.items():
            if p not in before:
                assert p in new, f"unexpected new prefix {p}"
            elif t < before[p]:
                assert p in raised, f"{p} went up a tier"
            elif t > before[p]:
                assert p not in locked, f"invariant 2: locked {p} demoted"
        for p in after:  # prefix-closed
            assert len(p) == 1 or p[:-1] in after
        self.prefixes = after

    def check_match(self, key, m: MatchResult) -> None:
        n = longest(self.prefixes, key)
        assert m.matched_pages == n, "invariant 7: not the longest cached prefix"
        by_tier = [0] * len(self.cache.tiers)
        for i in range(1, n + 1):
            by_tier[self.prefixes[tuple(key[:i])]] += 1
        assert m.pages_by_tier == by_tier


def apply(model: Model, op) -> None:
    c, kind = model.cache, op[0]
    before = dict(model.prefixes)
    free_before = [c.free_pages(t) for t in range(len(c.tiers))]
    nt = len(c.tiers)
    if kind == "insert":
        key, t, prio = op[1], min(op[2], nt - 1), op[3]
        have = longest(before, key)
        low = sum(1 for i in range(1, have + 1) if before[tuple(key[:i])] > t)
        need = low + len(key) - have
        added = c.tree.insert(key, t, priority=prio)
        after = model.snap()
        prefixes = {tuple(key[:i]) for i in range(1, len(key) + 1)}
        fresh = set(after) - set(before)
        assert fresh <= prefixes and len(fresh) == added
        assert all(after[p] == t for p in fresh)
        model.transition(after, raised={p for p in prefixes if after.get(p) == t}, new=fresh)
        if need <= free_before[t]:  # room enough: exactly the key, nothing else moves
            expect = dict(before)
            expect.update({p: min(before.get(p, t), t) for p in prefixes})
            assert after == expect
            assert c.tree.match_prefix(key, touch=False).matched_pages == len(key)
    elif kind in ("match", "peek"):
        m = c.tree.match_prefix(op[1], touch=kind == "match")
        model.check_match(op[1], m)
        assert model.snap() == before
    elif kind == "lock":
        m = c.tree.match_prefix(op[1])
        model.check_match(op[1], m)
        model.locks.append((c.tree.lock(m), tuple(op[1][:m.matched_pages])))
    elif kind == "unlock" and model.locks:
        node, _ = model.locks.pop(op[1] % len(model.locks))
        c.tree.unlock(node)
    elif kind == "evict":
        t, n = min(op[2], nt - 1), op[1]
        locked = model.locked()
        evictable = sum(1 for p, pt in before.items() if pt == t and p not in locked and all(
            qt == t for q, qt in before.items() if q[:len(p)] == p))
        freed = c.tree.evict(n, t)
        assert freed == min(n, evictable), "invariant 4"
        after = model.snap()
        gone = set(before) - set(after)
        assert len(gone) == freed and all(before[p] == t for p in gone)
        assert all(after[p] == before[p] for p in after)
        model.transition(after)
        if gone:  # insert after evict restores the matches
            p = max(gone, key=len)
            missing = {p[:i] for i in range(1, len(p) + 1)} - set(after)
            assert c.tree.insert(list(p), t, make_room=False) == len(missing)
            assert c.tree.match_prefix(list(p), touch=False).matched_pages == len(p)
            model.transition(model.snap(), new=missing)
    elif kind == "demote" and nt > 1:
        f, n = min(op[2], nt - 2), op[1]
        locked = model.locked()
        demotable = sum(1 for p, pt in before.items() if pt == f and p not in locked)
        pair = (c.tiers[f].name, c.tiers[f + 1].name)
        counted = c.stats["moved_pages"][pair]
        moved = c.demote(n, f)
        after = model.snap()
        assert moved <= n, "invariant 4"
        assert moved == c.stats["moved_pages"][pair] - counted
        assert moved == sum(1 for p in after if before.get(p) == f and after[p] == f + 1)
        if free_before[f + 1] >= n:
            assert moved == min(n, demotable)
        assert all(before[p] > f for p in set(before) - set(after))
        model.transition(after)
    elif kind == "promote":
        m = c.tree.match_prefix(op[1])
        model.check_match(op[1], m)
        path = [tuple(op[1][:i]) for i in range(1, m.matched_pages + 1)]
        need = sum(1 for p in path if before[p] > 0)
        res = c.promote(m)
        after = model.snap()
        assert res.pages == sum(1 for p in path if before[p] > 0 and after[p] == 0)
        assert res.bytes == res.pages * c.page_bytes
        if need <= free_before[0]:
            assert res.pages == need and all(after[p] == 0 for p in path)
        model.transition(after, raised=set(path))
    elif kind == "hold" and op[1] >= 0:  # a request's private pages: room made, or refused
        if c.allocate(op[1]):
            model.held += op[1]
        else:
            assert op[1] > free_before[0]
        model.transition(model.snap())
    elif kind == "hold":
        k = min(-op[1], model.held)
        c.free(k)
        model.held -= k
    c.check()  # invariants 1, 3, 5, 6
    assert c.held_pages == model.held
    assert model.snap() == model.prefixes
    for node, p in model.locks:  # invariant 2: locked paths stay cached
        assert node.alive and all(q in model.prefixes for q in (p[:i] for i in range(1, len(p) + 1)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(caps=st.lists(st.integers(0, 10), min_size=1, max_size=3).map(
           lambda caps: [max(caps[0], 2)] + caps[1:]),
       eviction=st.sampled_from(["lru", "lfu", "priority"]), ops=OPS)
def test_random_operations_keep_the_invariants(caps, eviction, ops):
    names = ["hbm", "host", "storage"]
    c = TierStore([Tier(names[i], cap, 1e9, 1e-6) for i, cap in enumerate(caps)],
                   page_bytes=100, eviction=eviction)
    model = Model(c)
    for op in ops:
        apply(model, op)
    for node, _ in model.locks:  # everything unlocked: the whole tree is evictable again
        c.tree.unlock(node)
    for t in reversed(range(len(caps))):
        c.tree.evict(10**6, t)
    c.check()
    assert c.tree.snapshot() == {} and c.used_pages(0) == c.held_pages


def test_stale_heap_entries_are_compacted_and_skipped():
    c = TierStore(100)
    keys = [[1, 2, 3], [1, 2, 4], [5, 6]]
    for k in keys:
        c.tree.insert(k)
    for i in range(3000):  # every touch leaves a stale entry behind
        c.tree.match_prefix(keys[i % 3])
    assert len(c.tree._heaps[0]) <= 4 * c.tree._nodes + 1024 + 1
    assert c.tree.evict(2) == 2  # LRU: the leaves [3] (touched at i=2997), then [4] (2998)
    assert [c.tree.match_prefix(k, touch=False).matched_pages for k in keys] == [2, 2, 2]
    assert c.tree.evict(100) == 4 and c.used_pages() == 0
    c.check()
