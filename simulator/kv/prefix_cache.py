"""A worker's KV pool with a radix prefix cache, memory tiers and swap (``kv_cache:``).

``PrefixKV`` stands in for ``BlockAllocator`` (same counting interface: ``total``,
``used``, ``free``, ``held``, ``blocks_for``, ``release``, ``set_held``), with a
``TierStore`` (simulator/kv/tiers.py: tiers, free pages, promotion and demotion) and its
``RadixCache`` (simulator/kv/radix.py: match, insert, lock, evict) behind it. A page is a
KV block (``page_size`` = ``scheduler.block_size``). The top tier (HBM, ``kv_blocks``
pages) holds three kinds of pages: cached pages (keyed in the tree, shared), the private
blocks of running requests (``t.blocks``, the store's held pages; draft and verify tokens'
blocks are among them while a step runs, as the kernel counts them) and nothing else;
lower tiers hold cached pages demoted from above and parked pages (swapped-out requests).

A request's key (``PrefixKeys``) is a sequence of page ids: its ``prefix_block_ids``
(Mooncake ``hash_ids``, 512-token blocks) expanded to 512 / page_size page ids each, or,
for a session without block ids, page j of the session's token stream (each turn's prompt
extends the previous turn's prompt + answer). A request with neither has no key: it can
neither hit nor be hit.

Life of a request:

- admission: longest-prefix match of its key, cut to ``prefill_target - 1`` tokens (the
  last prompt token is always computed, as in vLLM and SGLang). If the private blocks it
  still needs (+ the pages to promote) fit in what is free plus what unlocked cached pages
  can give up, the matched path is locked, lower-tier pages are promoted (their transfer
  time, bytes / bandwidth + latency per source tier, is charged to the next iteration of
  this worker), and the request starts with ``kv_len`` = the HBM hit: those tokens are
  not prefilled and their pages are not counted in its own blocks (``t.kv_shared``).
- growth: when a step needs more blocks than are free, unlocked cached pages are demoted
  (or freed in the lowest tier) first; running requests are preempted only after.
- finish: its pages (prompt + output where the key knows the output's ids) are inserted
  into the tree in the room its private blocks leave, and the path is unlocked.
- preemption by recompute: as a finish (its computed pages are cached, so the recompute
  may hit them), then it is requeued with ``kv_len`` 0. By swap: its private blocks are
  parked in the swap tier (bytes / bandwidth + latency charged now, and again when it
  comes back), it keeps its lock and its ``kv_len``; when the swap tier has no room it is
  recomputed instead.

Every cache operation happens at admission, at preemption (both at the top of a worker's
loop, the same in both paths), or when iterations are committed: ``commit_steps`` applies a
segment's steps in order, the eviction a step's growth needs before it (one ``make_room``
per step that needs one, as the batch scheduler would) and the inserts of the rows it
finished after it. The kernel stops a segment before any step whose eviction is not sure to
succeed (``segment_limits``), so a multi-step segment commits exactly what the same steps
run one by one do (tests/test_prefix_cache.py checks it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from specsim.simulator import rng
from specsim.simulator.execution.loop_rules import DONE
from specsim.simulator.kv.tiers import Tier, TierStore

BLOCK_TOKENS = 512  # a trace's prefix block (Mooncake hash_ids; traces/schema.py)
_U = np.uint64
_SESSION_SALT = 0x5E55_1017_C0DE_F00D


def _splitmix(z: np.ndarray) -> np.ndarray:
    """splitmix64 on a uint64 array (radix.py's ``_splitmix``, vectorised; wraps mod 2^64)."""
    return rng.mix(z + rng.GOLDEN)


def block_pages(block_ids: np.ndarray, n_pages: int, per: int) -> np.ndarray:
    """The first ``n_pages`` page ids of blocks ``block_ids`` (``per`` pages each); equal to
    ``radix.pages_from_block_ids`` (tests check it)."""
    nb = min(len(block_ids), -(-n_pages // per)) if per else 0
    if n_pages <= 0 or nb == 0:
        return np.zeros(0, np.int64)
    with np.errstate(over="ignore"):
        base = _splitmix(np.asarray(block_ids[:nb], np.int64).view(np.uint64))
        pages = _splitmix(base[:, None] ^ np.arange(per, dtype=np.uint64)[None, :]) >> _U(1)
    return pages.reshape(-1)[:n_pages].view(np.int64)


def stream_pages(session: int, n_pages: int) -> np.ndarray:
    """Page j of a session's token stream, j < n_pages (a session without block ids)."""
    if n_pages <= 0:
        return np.zeros(0, np.int64)
    with np.errstate(over="ignore"):
        base = _splitmix(np.array([session], np.int64).view(np.uint64) ^ _U(_SESSION_SALT))
        pages = _splitmix(base ^ np.arange(n_pages, dtype=np.uint64)) >> _U(1)
    return pages.view(np.int64)


class PrefixKeys:
    """Page-id keys of the requests of one run (shared by its workers; read-only)."""

    NONE, BLOCKS, SESSION = 0, 1, 2

    def __init__(self, table, page_tokens: int) -> None:
        self.t = table
        self.ps = int(page_tokens)
        n = table.n
        has_blocks = np.diff(table.prefix_ptr) > 0
        self.kind = np.where(has_blocks, self.BLOCKS,
                             np.where(table.session_id >= 0, self.SESSION, self.NONE)
                             ).astype(np.int8)
        if has_blocks.any() and BLOCK_TOKENS % self.ps:
            from specsim.errors import ScenarioError
            raise ScenarioError(f"kv_cache.page_size: the trace's prefix blocks are "
                                f"{BLOCK_TOKENS} tokens, not a multiple of the page size "
                                f"{self.ps}")
        self.per = BLOCK_TOKENS // self.ps if self.ps <= BLOCK_TOKENS else 0
        # the next turn of each request's session: its prompt holds this one's answer, so
        # its block ids name the pages of this request's output too
        self.next_turn = np.full(n, -1, np.int64)
        sess = np.flatnonzero(table.session_id >= 0)
        if len(sess):
            order = sess[np.lexsort((table.turn[sess], table.session_id[sess]))]
            same = table.session_id[order[1:]] == table.session_id[order[:-1]]
            self.next_turn[order[:-1][same]] = order[1:][same]
        self._memo: dict[tuple[int, int], tuple] = {}

    def has_key(self, rid: int) -> bool:
        return bool(self.kind[rid])

    def pages(self, rid: int, tokens: int, own: bool = False) -> tuple:
        """The key of the first ``tokens`` tokens of request ``rid``'s stream (full pages).
        Past its prompt, a request with block ids takes them from its session's next turn
        (unless ``own``: its own ids, which stop at its prompt)."""
        kind = int(self.kind[rid])
        n = int(tokens) // self.ps
        if kind == self.NONE or n <= 0:
            return ()
        t = self.t
        src = rid
        if kind == self.BLOCKS and not own and tokens > t.prompt[rid]:
            nxt = int(self.next_turn[rid])
            if nxt >= 0 and self.kind[nxt] == self.BLOCKS:
                src = nxt  # the answer's pages: as the next turn's prompt names them
        memo = (rid, n, src)
        got = self._memo.get(memo)
        if got is not None:
            return got
        if kind == self.SESSION:
            out = stream_pages(int(t.session_id[rid]), n)
        else:
            ids = t.prefix_ids[t.prefix_ptr[src]:t.prefix_ptr[src + 1]]
            cover = int(t.prompt[src]) // self.ps if src == rid else n
            out = block_pages(ids, min(n, cover, len(ids) * self.per), self.per)
        key = tuple(out.tolist())
        if len(self._memo) > 64:
            self._memo.clear()
        self._memo[memo] = key
        return key


@dataclass
class TierSpec:
    """One tier below HBM, per worker: capacity in bytes, link bandwidth (bytes/s for the
    whole worker) and latency."""

    name: str
    capacity_bytes: float
    bandwidth_bytes_s: float
    latency_s: float
    source: str = "scenario"  # where capacity and link came from (catalog entry, assumed)


@dataclass
class CacheConfig:
    """``kv_cache:`` resolved against the deployment (``Deployment.kv_cache``)."""

    prefix: bool
    page_tokens: int
    page_bytes: int  # one page of one worker (all its tensor-parallel shards)
    eviction: str
    tiers: list[TierSpec] = field(default_factory=list)
    swap: bool = False
    swap_tier: int = 1  # index in the radix tiers (0 = HBM)
    overlap: bool = False  # layer-wise loading: transfers overlap the iteration's compute

    def radix_tiers(self, hbm_pages: int) -> list[Tier]:
        out = [Tier("hbm", int(hbm_pages))]
        for ts in self.tiers:
            out.append(Tier(ts.name, int(ts.capacity_bytes // max(self.page_bytes, 1)),
                            ts.bandwidth_bytes_s, ts.latency_s))
        return out


class PrefixKV:
    """One worker's KV: the block-counting interface of ``BlockAllocator`` over a radix
    cache with tiers, plus admission, finish, preemption and swap with the cache."""

    def __init__(self, total_blocks: int, block_size: int, table, keys: PrefixKeys,
                 cfg: CacheConfig) -> None:
        self.total = int(total_blocks)
        self.block_size = int(block_size)
        self.t, self.keys, self.cfg = table, keys, cfg
        self.cache = TierStore(cfg.radix_tiers(total_blocks), page_tokens=block_size,
                               page_bytes=cfg.page_bytes, eviction=cfg.eviction)
        self.tree = self.cache.tree
        self.tier_names = [t.name for t in self.cache.tiers]
        self.peak = 0
        self.prefix = bool(cfg.prefix)
        self.priority = cfg.eviction == "priority"
        self.locks: dict[int, object] = {}  # rid -> locked tree node
        self.swapped: dict[int, int] = {}  # rid -> pages parked in the swap tier
        self.pending_s = 0.0  # transfer time to charge to the next iteration
        n = len(self.tier_names)
        self.stats = {
            "lookups": 0, "lookup_tokens": 0, "hit_tokens": [0] * n, "hit_blocks": [0] * n,
            "promoted_bytes": [0] * n, "transfer_s": 0.0,
            "swap_out": 0, "swap_in": 0, "swap_out_bytes": 0, "swap_in_bytes": 0,
            "swap_fallback": 0, "swap_dropped": 0, "recompute": 0, "evicted_for_growth": 0,
        }

    # ------------------------------------------------------------ BlockAllocator interface
    @property
    def used(self) -> int:
        return self.cache.used_pages(0)

    @property
    def free(self) -> int:
        return self.cache.free_pages(0)

    @property
    def held(self) -> int:
        """Blocks the requests hold privately (what ``t.blocks`` adds up to)."""
        return self.cache.held_pages

    def blocks_for(self, tokens):
        return -(-tokens // self.block_size)

    def allocate(self, n: int) -> None:
        if not self.cache.allocate(n):
            raise RuntimeError(f"KV: cannot allocate {n} blocks ({self.free} free)")
        self._peak()

    def release(self, n: int) -> None:
        self.cache.free(n)

    def set_held(self, held_before: int, held_after: int, peak_during: int) -> None:
        """The kernel's commit: applied step by step by ``commit_steps`` (evictions and
        inserts in between), which the worker calls next."""
        self._held_after = held_after

    def _peak(self) -> None:
        if self.used > self.peak:
            self.peak = self.used

    def segment_limits(self) -> tuple[int, int | None]:
        """What the rows may hold in steps 1.. of a multi-step segment such that every
        eviction a step needs is sure to succeed (the kernel stops the segment before any
        other): all but the locked cached pages; and, when evictions demote, no more than
        the lower tier is sure to take (finished rows' pages, cached as they finish,
        count)."""
        c = self.cache
        # locked pages of every tier: an insert may rewrite a locked lower-tier page into HBM
        limit = self.total - sum(c.locked_pages(i) for i in range(len(self.tier_names)))
        if len(self.tier_names) == 1:
            return limit, None
        last = len(self.tier_names) - 1
        room = 0  # pages the tiers below are sure to take: bottom up, what each can free
        for i in range(last, 0, -1):
            unlocked = c.cached_pages(i) - c.locked_pages(i)
            room = c.free_pages(i) + (unlocked if i == last else min(unlocked, room))
        return limit, self.total - c.cached_pages(0) + room

    def commit_steps(self, seg, a: int, b: int) -> None:
        """Steps [a, b) of a committed segment, as they would run one by one: before each
        step after the first, the eviction its growth needs (as the batch scheduler makes
        room: one ``make_room`` per step that needs one); after each, its rows' blocks,
        then the pages of the rows it finished. Only the steps where something happens are
        visited."""
        c = self.cache
        during, total = seg.during, self.total
        fins = (np.flatnonzero(seg.finishing[a:b].any(axis=1)) + a).tolist()
        fins.append(b)
        s = a
        for f in fins:
            end = min(f + 1, b)
            if s >= end:
                break
            cached = c.cached_pages(0)
            lo = max(s, 1)
            evicted = False
            if lo < end:
                d = during[lo:end]
                lim = total - cached
                prev = np.maximum.accumulate(np.concatenate(([lim], d[:-1])))
                for k in (np.flatnonzero(d > prev) + lo).tolist():
                    over = c.cached_pages(0) - (total - int(during[k]))
                    before = c.cached_pages(0)
                    if not c.make_room(c.free_pages(0) + over, 0):
                        raise RuntimeError("KV: a planned step's eviction failed")
                    self.stats["evicted_for_growth"] += before - c.cached_pages(0)
                    evicted = True
            top = total if evicted else int(during[s:end].max()) + cached
            self.peak = max(self.peak, min(top, total))
            if f < b:
                c.resize_held(int(seg.after_rows[f].sum()) - c.held_pages)
                self.finish(seg.rows[seg.finishing[f]])
            s = end
        c.resize_held(self._held_after - c.held_pages)
        self._peak()

    def make_room(self, n: int) -> bool:
        """Demote / free unlocked cached pages until ``n`` blocks are free."""
        before = self.cache.cached_pages(0)
        ok = self.cache.make_room(n, 0)
        self.stats["evicted_for_growth"] += before - self.cache.cached_pages(0)
        return ok

    # ------------------------------------------------------------ transfers
    def _charge(self, tier: int, pages: int, rid: int) -> float:
        """Moving ``pages`` between ``tier`` and the one above: latency + bytes / bandwidth,
        charged to this worker's next iteration (and noted on the request)."""
        if pages <= 0:
            return 0.0
        s = transfer_seconds(pages, self.cfg.page_bytes, self.cache.tiers[tier])
        self.pending_s += s
        self.stats["transfer_s"] += s
        self.t.kv_xfer_s[rid] += s
        return s

    def take_pending(self) -> float:
        s, self.pending_s = self.pending_s, 0.0
        return s

    # ------------------------------------------------------------ requests
    def admit(self, rid: int) -> bool:
        """Admit ``rid`` if its KV fits (see the module docstring); False changes nothing."""
        t = self.t
        if rid in self.swapped:
            return self._swap_in(rid)
        target = int(t.prefill_target[rid])
        landed = bool(t.kv_landed[rid])  # its KV came over a link whole: no match, kept
        key = self.keys.pages(rid, target - 1) if self.prefix and not landed else ()
        low = hbm = 0
        if key:
            peek = self.tree.match_prefix(key, touch=False)
            hbm = peek.pages_by_tier[0]
            low = peek.matched_pages - hbm
        need = int(self.blocks_for(target - (hbm + low) * self.block_size)) + 1
        c = self.cache
        spare = c.free_pages(0) + c.cached_pages(0) - c.locked_pages(0) - hbm
        if need + low > spare:
            return False
        node = None
        hit = 0
        if key:
            m = self.tree.match_prefix(key)
            node = self.tree.lock(m) if m.matched_pages else None
            if node is not None and low:
                pr = c.promote(node)
                for name, p in pr.pages_by_source.items():
                    i = self.tier_names.index(name)
                    self._charge(i, p, rid)
                    self.stats["promoted_bytes"][i] += p * self.cfg.page_bytes
            if node is not None:
                for nd in self.tree.path(node):
                    if nd.tier:
                        break
                    hit += len(nd.key)
            need = int(self.blocks_for(target - hit * self.block_size)) + 1
        if not c.allocate(need):
            if node is not None:
                self.tree.unlock(node)
            return False
        if key:
            s = self.stats
            s["lookups"] += 1
            s["lookup_tokens"] += len(key) * self.block_size
            # pages of the hit by the tier they were found in (a promoted page counts for
            # the tier it came from)
            found = [0] * len(self.tier_names)
            found[0] = min(hbm, hit)
            rest = hit - found[0]
            for i in range(1, len(found)):
                take = min(rest, peek.pages_by_tier[i])
                found[i] = take
                rest -= take
            for i, p in enumerate(found):
                s["hit_blocks"][i] += p
                s["hit_tokens"][i] += p * self.block_size
            t.kv_hit_tokens[rid] += hit * self.block_size
        if node is not None:
            self.locks[rid] = node
        if not landed:
            t.kv_len[rid] = hit * self.block_size
        t.kv_shared[rid] = hit * self.block_size
        t.blocks[rid] = need
        self._peak()
        return True

    def _swap_in(self, rid: int) -> bool:
        pages = self.swapped[rid]
        if not self.cache.allocate(pages):
            return False
        tier = self.cfg.swap_tier
        self.cache.unpark(pages, tier)
        del self.swapped[rid]
        self.t.blocks[rid] = pages
        self._charge(tier, pages, rid)
        self.stats["swap_in"] += 1
        self.stats["swap_in_bytes"] += pages * self.cfg.page_bytes
        self._peak()
        return True

    def _cache_pages(self, rid: int) -> None:
        """Insert what ``rid`` computed (its key, as far as its KV goes) and unlock it."""
        t = self.t
        node = self.locks.pop(rid, None)
        if self.prefix:
            tokens = min(int(t.kv_len[rid]), int(t.prompt[rid] + t.generated[rid]))
            key = self.keys.pages(rid, tokens)
            shared = int(t.kv_shared[rid]) // self.block_size
            if shared and key:  # the key must run through the pages it shares: then what
                # it adds never exceeds the blocks it just gave back (no eviction here)
                have = tuple(p for nd in self.tree.path(node) for p in nd.key)[:shared]
                if key[:shared] != have:
                    key = self.keys.pages(rid, min(tokens, int(t.prompt[rid])), own=True)
                    if key[:shared] != have:
                        key = ()
            if key:
                pr = self._priority(rid) if self.priority else None
                self.tree.insert(key, 0, priority=pr, make_room=False)
        if node is not None:
            self.tree.unlock(node)
        t.kv_shared[rid] = 0

    def _priority(self, rid: int) -> float:
        return PRIORITY.get(str(self.t.slo_tier[rid]), 1.0)

    def finish(self, rows: np.ndarray) -> None:
        """Finished requests (their private blocks already released), in finish order."""
        for rid in rows.tolist():
            self._cache_pages(rid)

    def preempt(self, rid: int) -> str:
        """Free ``rid``'s private blocks: swap them out, or cache them for a recompute.
        Returns the kind ("swap" or "recompute"); the caller requeues the request."""
        t = self.t
        blocks = int(t.blocks[rid])
        if self.cfg.swap:
            if blocks and self.cache.park(blocks, self.cfg.swap_tier):
                self.cache.free(blocks)
                t.blocks[rid] = 0
                self.swapped[rid] = blocks
                self._charge(self.cfg.swap_tier, blocks, rid)
                self.stats["swap_out"] += 1
                self.stats["swap_out_bytes"] += blocks * self.cfg.page_bytes
                return "swap"
            self.stats["swap_fallback"] += 1
        self.cache.free(blocks)
        t.blocks[rid] = 0
        self._cache_pages(rid)
        self.stats["recompute"] += 1
        return "recompute"

    def drop_swaps(self) -> None:
        """Give up every swapped-out request's KV (they recompute): called when an empty
        batch cannot admit anyone because swapped requests pin HBM pages with their locks."""
        t = self.t
        for rid, pages in list(self.swapped.items()):
            self.cache.unpark(pages, self.cfg.swap_tier)
            del self.swapped[rid]
            node = self.locks.pop(rid, None)
            if node is not None:
                self.tree.unlock(node)
            t.kv_len[rid] = 0
            t.kv_shared[rid] = 0
            t.prefill_target[rid] = t.prompt[rid] + t.generated[rid]
            self.stats["swap_dropped"] += 1

    # ------------------------------------------------------------ routers and reports
    def peek(self, rid: int) -> tuple[int, ...]:
        """Read-only: tokens of ``rid``'s prompt cached here, per tier (nothing changes)."""
        if not self.prefix:
            return (0,) * len(self.tier_names)
        key = self.keys.pages(rid, int(self.t.prefill_target[rid]) - 1)
        if not key:
            return (0,) * len(self.tier_names)
        m = self.tree.match_prefix(key, touch=False)
        return tuple(p * self.block_size for p in m.pages_by_tier)

    def tier_use(self) -> list[int]:
        """Pages in use per tier (HBM: cached pages only; lower tiers: cached + parked)."""
        c = self.cache
        return [c.cached_pages(0)] + [c.used_pages(i) for i in range(1, len(self.tier_names))]

    def check(self, idle: bool) -> None:
        """The radix invariants; with ``idle`` (no request running or queued here) also:
        nothing held, parked or locked, every block free or cached."""
        c = self.cache
        c.check()
        if idle:
            if c.held_pages or self.locks or self.swapped:
                raise AssertionError(f"KV: {c.held_pages} held, {len(self.locks)} locks, "
                                     f"{len(self.swapped)} swapped at the end")
            for i, name in enumerate(self.tier_names):
                if c.parked_pages(i) or c.locked_pages(i):
                    raise AssertionError(f"KV tier {name}: {c.parked_pages(i)} parked, "
                                         f"{c.locked_pages(i)} locked at the end")
                if c.used_pages(i) != c.cached_pages(i):
                    raise AssertionError(f"KV tier {name}: {c.used_pages(i)} used, "
                                         f"{c.cached_pages(i)} cached at the end")


#: eviction priority of an SLO tier (``kv_cache.eviction: priority``: lowest goes first)
PRIORITY = {"batch": 0.0, "standard": 1.0, "premium": 2.0}


def transfer_seconds(pages: int, page_bytes: int, tier: Tier) -> float:
    """What moving ``pages`` between ``tier`` and the one above costs (for tests)."""
    if pages <= 0:
        return 0.0
    bw = tier.bandwidth_bytes_s
    return tier.latency_s + (pages * page_bytes / bw if math.isfinite(bw) else 0.0)


# ---------------------------------------------------------------- run summary and checks


def _tier_spec(ts: TierSpec) -> dict:
    """A lower tier as resolved: capacity and link of one worker, and where they came from."""
    return {"capacity_gb_per_worker": ts.capacity_bytes / 1e9,
            "bandwidth_gb_s_per_worker": ts.bandwidth_bytes_s / 1e9,
            "latency_s": ts.latency_s, "source": ts.source}


def summary(sim) -> dict:
    """``metrics.json``'s ``kv_cache`` block: hits per tier (tokens and blocks, and rates
    over the tokens looked up), bytes moved per tier pair, evictions, preemptions by kind,
    tier use at the end, and the transfer time inside TTFT."""
    cfg: CacheConfig = sim.kv_cache
    workers = sim.workers
    kvs = [w.kv for w in workers]
    names = kvs[0].tier_names
    t = sim.table

    def total(key):
        return [sum(k.stats[key][i] for k in kvs) for i in range(len(names))]

    hit_tokens, hit_blocks = total("hit_tokens"), total("hit_blocks")
    looked = sum(k.stats["lookup_tokens"] for k in kvs)
    moved_bytes: dict[str, int] = {}
    moved_blocks: dict[str, int] = {}
    evicted: dict[str, int] = dict.fromkeys(names, 0)
    for k in kvs:
        st = k.cache.stats
        for (a, b), v in st["moved_bytes"].items():
            if v:
                moved_bytes[f"{a}->{b}"] = moved_bytes.get(f"{a}->{b}", 0) + int(v)
                moved_blocks[f"{a}->{b}"] = (moved_blocks.get(f"{a}->{b}", 0)
                                             + int(st["moved_pages"][(a, b)]))
        for name, v in k.tree.stats["evicted_pages"].items():
            evicted[name] += int(v)
    swap_name = names[cfg.swap_tier] if cfg.swap and cfg.swap_tier < len(names) else None
    if swap_name is not None:
        for key, pair in (("swap_out_bytes", f"hbm->{swap_name} (swap)"),
                          ("swap_in_bytes", f"{swap_name}->hbm (swap)")):
            v = sum(k.stats[key] for k in kvs)
            if v:
                moved_bytes[pair] = int(v)
                moved_blocks[pair] = int(v // max(cfg.page_bytes, 1))
    done = t.status == DONE
    ttft = t.first_token - t.arrival
    xfer = t.kv_xfer_s
    ttft_sum = float(np.nansum(ttft[done]))
    recompute = sum(w.preempt_kinds["recompute"] for w in workers)
    swap = sum(w.preempt_kinds["swap"] for w in workers)
    return {
        "prefix_cache": cfg.prefix, "eviction": cfg.eviction,
        "preemption": "swap" if cfg.swap else "recompute",
        "layerwise_loading": cfg.overlap, "page_tokens": cfg.page_tokens,
        "page_bytes": cfg.page_bytes,
        "tiers": {name: {"capacity_blocks_per_worker": int(kvs[0].cache.capacity(i)),
                         **(_tier_spec(cfg.tiers[i - 1]) if i else {}),
                         "used_blocks_at_end": int(sum(k.cache.used_pages(i) for k in kvs)),
                         "cached_blocks_at_end": int(sum(k.cache.cached_pages(i)
                                                         for k in kvs))}
                  for i, name in enumerate(names)},
        "lookups": int(sum(k.stats["lookups"] for k in kvs)),
        "lookup_tokens": int(looked),
        "hit_tokens": dict(zip(names, map(int, hit_tokens), strict=True)),
        "hit_blocks": dict(zip(names, map(int, hit_blocks), strict=True)),
        "hit_rate": {**{n: (h / looked if looked else 0.0)
                        for n, h in zip(names, hit_tokens, strict=True)},
                     "total": sum(hit_tokens) / looked if looked else 0.0},
        "prefill_tokens_saved": int(sum(hit_tokens)),
        "bytes_moved": moved_bytes,
        "blocks_moved": moved_blocks,
        "evicted_blocks": evicted,
        "evicted_for_growth_blocks": int(sum(k.stats["evicted_for_growth"] for k in kvs)),
        "preemptions_by_kind": {"recompute": int(recompute), "swap": int(swap)},
        "swap_fallbacks": int(sum(k.stats["swap_fallback"] for k in kvs)),
        "swaps_dropped": int(sum(k.stats["swap_dropped"] for k in kvs)),
        "transfer_s": float(sum(k.stats["transfer_s"] for k in kvs)),
        "ttft_transfer_s": {"mean": float(xfer[done].mean()) if done.any() else 0.0,
                            "max": float(xfer[done].max()) if done.any() else 0.0},
        "ttft_transfer_fraction": float(xfer[done].sum() / ttft_sum) if ttft_sum > 0 else 0.0,
    }


def check_invariants(sim) -> None:
    """Per worker: the radix invariants; parked pages = swapped requests' pages; locks only
    for requests queued or running there; an idle worker holds nothing but cached pages in
    every tier. Per request: tokens conserved (a finished request's KV covers its prompt and
    every output token but the last, whatever it was preempted, swapped or hit on the way)."""
    t = sim.table
    for w in sim.workers:
        kv = w.kv
        mine = set(w.run.tolist()) | set(w.waiting)
        if not set(kv.locks) <= mine or not set(kv.swapped) <= mine:
            raise AssertionError(f"worker {w.wid}: locks or swaps of requests not here")
        parked = kv.cache.parked_pages(kv.cfg.swap_tier) if kv.cfg.swap else 0
        if parked != sum(kv.swapped.values()):
            raise AssertionError(f"worker {w.wid}: {parked} pages parked, swapped requests "
                                 f"hold {sum(kv.swapped.values())}")
        kv.check(idle=not mine)
    done = t.status == DONE
    if (t.kv_len[done] != t.prompt[done] + t.generated[done] - 1).any():
        raise AssertionError("KV tokens of finished requests != prompt + output - 1")
    if (t.kv_len > t.prompt + t.generated).any() or (t.kv_shared > t.kv_len).any():
        raise AssertionError("a request's KV exceeds its tokens (or its shared prefix its KV)")
