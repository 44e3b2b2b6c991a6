"""The radix prefix cache wired into the workers (``kv_cache:``, simulator/kv/prefix_cache.py):
hit rates computed by hand, what a hit costs per tier, swap preemption, nothing leaking in
any tier, the multi-step segment equal to step by step, real traces, and runs without the
cache unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from specsim.cost_models.catalog import get_model
from specsim.errors import ScenarioError
from specsim.simulator.cluster.engine import Simulation, build_trace, load_scenario, run_scenario
from specsim.simulator.kv.prefix_cache import block_pages, stream_pages
from specsim.simulator.kv.radix import pages_from_block_ids
from tests.conftest import SHARED, make_trace

PS = 16  # page = block size


def run(sc, tr=None):
    return run_scenario(sc, trace=tr)


def base(kv_cache=None, **over):
    sc = {
        "model": "Llama-3.1-8B",
        "hardware": {"accelerator": "H100-SXM", "count": 1},
        "speculation": {"method": "none"},
        "scheduler": {"max_batch": 64, "token_budget": 8192},
        "router": {"policy": "round_robin"},
        "workload": {},
        "simulation": {"progress": False},
    }
    if kv_cache is not None:
        sc["kv_cache"] = kv_cache
    for k, v in over.items():
        sc[k] = {**sc.get(k, {}), **v} if isinstance(v, dict) else v
    return sc


def trace(prompts, outputs, gap=100.0, blocks=None, sessions=None, turns=None):
    n = len(prompts)
    tr = make_trace(n, gap=gap)
    tr["prompt_tokens"] = np.asarray(prompts)
    tr["output_tokens"] = np.asarray(outputs)
    if blocks is not None:
        tr["prefix_block_ids"] = [tuple(b) for b in blocks]
    if sessions is not None:
        tr["session_id"] = sessions
        tr["turn"] = turns
    return tr


def spec_scenario(kv_cache, router="least_loaded", fast=True, count=2, fraction=0.25,
                  requests=100):
    """A multi-turn chat under KV pressure, with a draft model (speculative KV in play)."""
    return {
        "model": "Llama-3.1-8B",
        "hardware": {"accelerator": "H100-SXM", "count": count, "memory_fraction": fraction},
        "speculation": {"method": "draft_model", "k": 4, "drafter": "Llama-3.2-1B",
                        "acceptance": {"alpha": 0.75, "per_request": {"concentration": 8}}},
        "scheduler": {"max_batch": 64, "token_budget": 2048},
        "router": {"policy": router},
        "kv_cache": kv_cache,
        "workload": {"synthetic": {
            "arrival": {"process": "poisson", "rate": 8}, "requests": requests,
            "prompt_tokens": {"distribution": "lognormal", "mean": 1500, "sigma": 0.5,
                              "max": 6000},
            "output_tokens": {"distribution": "lognormal", "mean": 600, "sigma": 0.5,
                              "max": 1500},
            "sessions": {"turns": {"distribution": "uniform", "low": 2, "high": 6},
                         "think_time_s": {"distribution": "exponential", "mean": 10},
                         "followup_tokens": {"distribution": "lognormal", "mean": 200,
                                             "sigma": 0.5}},
            "shared_prefix_tokens": 1024}},
        "simulation": {"progress": False, "fast_path": fast},
    }


# ---------------------------------------------------------------- keys


def test_vectorised_pages_equal_the_radix_reference():
    for ids, tokens in [([7], 512), ([7, 9], 1024), ([7, 9], 700), ([7], 5000), ([], 300),
                        ([-3, 2**62, 0], 1536), ([1, 2, 3], 16), ([1], 15)]:
        ref = pages_from_block_ids(ids, tokens)
        n = min(len(ids) * 32, tokens // PS)
        assert block_pages(np.array(ids, np.int64), n, 32).tolist() == ref
    assert len(set(stream_pages(3, 50).tolist())) == 50
    assert stream_pages(3, 50)[:20].tolist() == stream_pages(3, 20).tolist()
    assert set(stream_pages(3, 50).tolist()).isdisjoint(stream_pages(4, 50).tolist())


# ---------------------------------------------------------------- hit rates by hand


def test_shared_blocks_hit_rate_by_hand():
    """n requests, one after another, share blocks 0 and 1 (1024 tokens) and differ in the
    third: each after the first finds 64 pages; each looks up (1536 - 1) // 16 pages."""
    n = 6
    blocks = [(0, 1, 100 + i) for i in range(n)]
    res = run(base({"prefix_cache": True}), trace([1536] * n, [20] * n,
                                                           blocks=blocks))
    kc = res.metrics["kv_cache"]
    looked = n * ((1536 - 1) // PS) * PS
    assert kc["lookup_tokens"] == looked
    assert kc["hit_tokens"] == {"hbm": (n - 1) * 1024}
    assert kc["hit_blocks"] == {"hbm": (n - 1) * 64}
    assert kc["hit_rate"]["hbm"] == pytest.approx((n - 1) * 1024 / looked)
    assert kc["prefill_tokens_saved"] == (n - 1) * 1024
    assert res.requests["ttft_s"].iloc[1] < res.requests["ttft_s"].iloc[0]
    assert res.metrics["kv_blocks_used_at_end"] == 0


def test_session_turns_hit_their_earlier_turns_by_hand():
    """A session without block ids: turn n's prompt extends turn n-1's prompt + answer, so
    it finds the (prompt + output - 1) // 16 pages turn n-1 computed."""
    prompts, outputs = [1000], [300, 250, 100, 40]
    for o, f in zip(outputs[:-1], [200, 50, 333], strict=True):
        prompts.append(prompts[-1] + o + f)
    n = len(prompts)
    res = run(base({"prefix_cache": True}),
                       trace(prompts, outputs, sessions=[5] * n, turns=list(range(n))))
    kc = res.metrics["kv_cache"]
    hits = [0] + [min((prompts[i - 1] + outputs[i - 1] - 1) // PS, (prompts[i] - 1) // PS) * PS
                  for i in range(1, n)]
    assert kc["hit_tokens"]["hbm"] == sum(hits)
    assert kc["lookup_tokens"] == sum((p - 1) // PS * PS for p in prompts)
    assert res.requests["prefix_hit_tokens"].tolist() == hits


def test_block_ids_of_the_next_turn_name_the_answer_pages():
    """With block ids and sessions (the synthetic generator's form), a turn's answer is
    cached under the ids the next turn's prompt gives it: the next turn finds its whole
    history, not only the full blocks of the earlier prompt."""
    p0, o0 = 1000, 600  # turn 1: 1000 + 600 + 400 = 2000 tokens, 4 blocks (3 full)
    blocks = [(0, 50), (0, 1, 2, 60)]
    res = run(base({"prefix_cache": True}),
                       trace([p0, 2000], [o0, 10], blocks=blocks, sessions=[1, 1],
                             turns=[0, 1]))
    # turn 0 cached its prompt + answer (1599 tokens) under turn 1's ids: 99 pages
    assert res.requests["prefix_hit_tokens"].tolist() == [0, (p0 + o0 - 1) // PS * PS]


def test_a_request_without_prefix_information_never_hits():
    res = run(base({"prefix_cache": True}), trace([800] * 4, [10] * 4))
    kc = res.metrics["kv_cache"]
    assert kc["lookups"] == 0 and kc["hit_rate"]["total"] == 0.0


# ---------------------------------------------------------------- what a hit costs


HOST = {"name": "host_dram", "capacity_gb": 64, "bandwidth_gb_s": 20.0, "latency_s": 2e-3}


def _three(shared_a: bool, big_c: bool):
    """A (prompt 1536: blocks 0, 1, 50), then C, then B (blocks 0, 1, 51; 1024 tokens in
    common with A), each alone. With 200 KV blocks a big C (3000 tokens) demotes most of
    A's pages to host DRAM (the tail of A first: 11 of B's 64 pages stay in HBM); a small
    C (160 tokens) leaves them all in HBM."""
    a = (0, 1, 50) if shared_a else (7, 8, 50)
    c = tuple(range(200, 206)) if big_c else (300,)
    return trace([1536, 3000 if big_c else 160, 1536], [16, 16, 16],
                 blocks=[a, c, (0, 1, 51)])


def _b_ttft(kv_cache, tr):
    res = run(base(kv_cache, scheduler={"kv_blocks": 200}), tr)
    req = res.requests
    assert (req["status"] == "completed").all()
    return float(req["ttft_s"].iloc[2]), res


def test_a_host_hit_costs_the_transfer_more_than_an_hbm_hit():
    kc = {"prefix_cache": True, "tiers": [HOST]}
    hbm, r1 = _b_ttft(kc, _three(shared_a=True, big_c=False))
    host, r2 = _b_ttft(kc, _three(shared_a=True, big_c=True))
    miss, r3 = _b_ttft(kc, _three(shared_a=False, big_c=False))
    off, _ = _b_ttft(None, _three(shared_a=False, big_c=False))
    assert r1.requests["prefix_hit_tokens"].iloc[2] == 1024
    assert r1.metrics["kv_cache"]["hit_tokens"] == {"hbm": 1024, "host_dram": 0}
    found = r2.metrics["kv_cache"]["hit_blocks"]
    assert found == {"hbm": 11, "host_dram": 53}
    page_bytes = r2.metrics["kv_cache"]["page_bytes"]
    transfer = HOST["latency_s"] + 53 * page_bytes / (HOST["bandwidth_gb_s"] * 1e9)
    assert host - hbm == pytest.approx(transfer, rel=1e-9, abs=1e-12)
    assert r2.requests["kv_transfer_s"].iloc[2] == pytest.approx(transfer)
    assert r2.metrics["kv_cache"]["bytes_moved"]["host_dram->hbm"] == 53 * page_bytes
    # a miss prefills those tokens: exactly as without any cache, and slower than a hit
    assert miss == off
    assert miss > hbm
    assert r3.metrics["kv_cache"]["hit_tokens"]["hbm"] == 0


def test_layerwise_loading_hides_the_transfer_under_compute():
    kc = {"prefix_cache": True, "tiers": [HOST]}
    host, _ = _b_ttft(kc, _three(shared_a=True, big_c=True))
    hidden, r = _b_ttft({**kc, "layerwise_loading": True}, _three(shared_a=True, big_c=True))
    hbm, _ = _b_ttft(kc, _three(shared_a=True, big_c=False))
    transfer = r.metrics["kv_cache"]["transfer_s"]
    assert hidden == pytest.approx(max(hbm, transfer), rel=1e-9)
    assert hbm <= hidden < host


# ---------------------------------------------------------------- swap and pressure


def test_swap_preemption_moves_kv_to_host_and_back():
    res = run(spec_scenario({"prefix_cache": True, "preemption": "swap",
                                      "tiers": [{"name": "host_dram", "capacity_gb": 4}]}))
    kc, m = res.metrics["kv_cache"], res.metrics
    assert kc["preemptions_by_kind"]["swap"] > 0 and m["preemptions"] > 0
    moved = kc["bytes_moved"]
    assert moved["hbm->host_dram (swap)"] == moved["host_dram->hbm (swap)"] > 0
    assert kc["transfer_s"] > 0
    assert kc["tiers"]["host_dram"]["used_blocks_at_end"] == \
        kc["tiers"]["host_dram"]["cached_blocks_at_end"]  # nothing left parked
    rec = run(spec_scenario({"prefix_cache": True}))
    assert rec.metrics["kv_cache"]["preemptions_by_kind"]["recompute"] > 0
    assert rec.metrics["kv_cache"]["preemptions_by_kind"]["swap"] == 0


def test_a_full_swap_tier_falls_back_to_recompute():
    res = run(spec_scenario({"prefix_cache": True, "preemption": "swap",
                                      "tiers": [{"name": "host_dram", "capacity_gb": 0.02}]}))
    kc = res.metrics["kv_cache"]
    assert kc["swap_fallbacks"] > 0 and kc["preemptions_by_kind"]["recompute"] > 0


@pytest.mark.parametrize("kv_cache", [
    {"prefix_cache": True},
    {"prefix_cache": True, "eviction": "lfu",
     "tiers": [{"name": "host_dram", "capacity_gb": 2},
               {"name": "ssd", "capacity_gb": 8, "bandwidth_gb_s": 5, "latency_s": 1e-4}]},
    {"prefix_cache": True, "preemption": "swap", "eviction": "priority",
     "tiers": [{"name": "host_dram", "capacity_gb": 4}]},
    {"prefix_cache": False, "preemption": "swap",
     "tiers": [{"name": "host_dram", "capacity_gb": 4}]},
], ids=["hbm", "three-tiers-lfu", "swap-priority", "swap-no-prefix"])
def test_nothing_leaks_in_any_tier(kv_cache):
    sc, base_dir, _ = load_scenario(spec_scenario(kv_cache))
    sim = Simulation(sc, build_trace(sc, base_dir, get_model(sc.model).max_context),
                     base_dir)
    sim.run()
    sim.check_invariants()  # every tier: blocks free or cached; tokens conserved
    for w in sim.workers:
        c = w.kv.cache
        assert c.held_pages == 0 and not w.kv.locks
        for i in range(len(c.tiers)):
            assert c.used_pages(i) == c.cached_pages(i) <= c.capacity(i)
            assert c.locked_pages(i) == 0 and c.parked_pages(i) == 0
    t = sim.table
    done = t.status == 3
    assert (done | (t.status == 4)).all() and done.sum() > 80
    assert (t.kv_len[done] == t.prompt[done] + t.generated[done] - 1).all()
    assert (t.generated[done] == t.output[done]).all()


def test_horizon_with_the_cache_conserves_what_is_in_flight():
    sc = spec_scenario({"prefix_cache": True, "preemption": "swap",
                        "tiers": [{"name": "host_dram", "capacity_gb": 4}]})
    sc["simulation"]["horizon_s"] = 12.0
    res = run_scenario(sc)  # check_invariants runs: held = requests' blocks, parked = swaps
    assert res.metrics["requests_in_flight"] > 0


# ---------------------------------------------------------------- exactness


@pytest.mark.parametrize("kv_cache,router", [
    ({"prefix_cache": True}, "least_loaded"),
    ({"prefix_cache": True, "preemption": "swap",
      "tiers": [{"name": "host_dram", "capacity_gb": 2}]}, "cache_aware"),
    ({"prefix_cache": True, "tiers": [{"name": "host_dram", "capacity_gb": 0.5}]},
     "session_affinity"),
    ({"prefix_cache": True, "preemption": "swap", "layerwise_loading": True,
      "eviction": "lfu", "tiers": [{"name": "host_dram", "capacity_gb": 2}]}, "round_robin"),
], ids=["hbm", "swap-cache-aware", "small-host-affinity", "layerwise-lfu"])
def test_fast_path_gives_the_step_by_step_result_with_the_cache(kv_cache, router):
    fast = run(spec_scenario(kv_cache, router, fast=True, requests=80))
    slow = run(spec_scenario(kv_cache, router, fast=False, requests=80))
    a, b = fast.requests, slow.requests
    for col in ("output_tokens", "accepted_tokens", "drafted_tokens", "steps", "worker",
                "preemptions", "prefix_hit_tokens"):
        assert (a[col] == b[col]).all(), col
    np.testing.assert_allclose(a["finish_s"], b["finish_s"], rtol=1e-9)
    np.testing.assert_allclose(a["kv_transfer_s"], b["kv_transfer_s"], rtol=1e-9)
    assert fast.metrics["iterations"] == slow.metrics["iterations"]
    ka, kb = fast.metrics["kv_cache"], slow.metrics["kv_cache"]
    for key in ("hit_tokens", "bytes_moved", "evicted_blocks", "preemptions_by_kind", "tiers"):
        assert ka[key] == kb[key], key
    assert ka["hit_tokens"]["hbm"] > 0


# ---------------------------------------------------------------- unchanged without it


def _same(a, b):
    ma = {k: v for k, v in a.metrics.items() if k not in ("wall_time_s", "kv_cache")}
    mb = {k: v for k, v in b.metrics.items() if k not in ("wall_time_s", "kv_cache")}
    assert ma == mb or repr(ma) == repr(mb)  # NaN != NaN: compare the text then
    assert a.requests.equals(b.requests[a.requests.columns])
    assert a.iterations.equals(b.iterations[a.iterations.columns])


def test_no_kv_cache_section_gives_the_result_of_prefix_cache_false():
    tr = make_trace(150, rate=20.0, prompt=(50, 3000), output=(1, 900), seed=3)
    sc = spec_scenario({})
    del sc["kv_cache"]
    off = run(sc, tr)
    sc["kv_cache"] = {"prefix_cache": False}
    same = run(sc, tr)
    _same(off, same)
    assert "kv_cache" not in off.metrics and "kv_cache" not in same.metrics
    assert list(off.requests.columns) == list(same.requests.columns)
    assert list(off.iterations.columns) == list(same.iterations.columns)
    assert off.metrics["preemptions"] > 0  # the pool is under pressure
    # the cache on, but a trace without prefixes: the same requests, steps and times (up
    # to float sums: the kernel may cut segments elsewhere)
    on = run({**sc, "kv_cache": {"prefix_cache": True}}, tr)
    a, b = off.requests, on.requests
    for col in a.columns:
        if a[col].dtype.kind == "f":
            np.testing.assert_allclose(a[col], b[col], rtol=1e-9, err_msg=col)
        else:
            assert a[col].equals(b[col]), col
    assert off.metrics["iterations"] == on.metrics["iterations"]
    assert off.metrics["preemptions"] == on.metrics["kv_cache"]["preemptions_by_kind"][
        "recompute"]
    assert "kv_cached_blocks" in on.iterations.columns
    assert on.metrics["kv_cache"]["hit_rate"]["total"] == 0.0


def test_kv_cache_keys_are_checked():
    with pytest.raises(ScenarioError, match="kv_cache.page_size: expected scheduler.block_size"):
        run(base({"prefix_cache": True, "page_size": 32}), trace([100], [5]))
    with pytest.raises(ScenarioError, match="kv_cache.preemption: swap needs a tier"):
        run(base({"preemption": "swap"}), trace([100], [5]))
    with pytest.raises(ScenarioError, match=r"kv_cache.tiers.0.capacity_gb: expected GB"):
        run(base({"tiers": [{"name": "ssd"}]}), trace([100], [5]))  # no catalog default


def test_host_dram_defaults_come_from_the_catalog_with_their_source():
    from specsim.cost_models.catalog import get_hardware

    h100 = get_hardware("H100-SXM", "h")
    tr = trace([100], [5])
    res = run(base({"prefix_cache": True, "tiers": [{"name": "host_dram"}]},
                   **{"hardware": {"accelerator": "H100-SXM", "count": 2,
                                   "tensor_parallel": 2}}), tr)
    note = next(n for n in res.notes if n.startswith("kv_cache tiers"))
    per_worker_gb = 2 * h100.host_memory_bytes / 1e9  # a TP-2 worker's two devices' share
    assert f"host_dram {per_worker_gb:g} GB at {h100.host_link_bw / 1e9:g} GB/s" in note
    assert "capacity and link from the H100-SXM catalog entry" in note
    assert "DGX H100 datasheet" in note and "assumed" not in note
    tier = res.metrics["kv_cache"]["tiers"]["host_dram"]  # metrics.json says so too
    assert tier["capacity_gb_per_worker"] == pytest.approx(per_worker_gb)
    assert tier["bandwidth_gb_s_per_worker"] == pytest.approx(2 * h100.host_link_bw / 1e9)
    assert "capacity and link from the H100-SXM catalog entry" in tier["source"]
    # given values win; a tier the catalog does not cover keeps the assumed link, said so
    res = run(base({"prefix_cache": True,
                    "tiers": [{"name": "host_dram", "capacity_gb": 64, "bandwidth_gb_s": 20},
                              {"name": "ssd", "capacity_gb": 500}]}), tr)
    note = next(n for n in res.notes if n.startswith("kv_cache tiers"))
    assert "host_dram 64 GB at 20 GB/s" in note and "catalog" not in note
    assert "ssd 500 GB at 25 GB/s" in note and "(assumed link default)" in note
    tiers = res.metrics["kv_cache"]["tiers"]
    assert tiers["host_dram"]["source"] == "scenario"
    assert tiers["ssd"]["source"] == "assumed link default"
    # an accelerator without a host entry: host_dram needs its capacity, and says which key
    with pytest.raises(ScenarioError, match=r"^kv_cache.tiers.0.capacity_gb: expected GB.*"
                                            r"TPU7x catalog entry has no host.memory_gb_per"):
        _deployment("TPU7x", [{"name": "host_dram"}])


def _deployment(accelerator: str, tiers: list, model: str = "Llama-3.1-8B"):
    from specsim.simulator.cluster.engine import Deployment, load_scenario

    sc = base({"prefix_cache": True, "tiers": tiers},
              **{"hardware": {"accelerator": accelerator, "count": 1}, "model": model})
    d = Deployment(*load_scenario(sc)[:2])
    return d, next(n for n in d.notes if n.startswith("kv_cache tiers"))


@pytest.mark.parametrize("accelerator,system", [("H200-SXM", "DGX H200"),
                                                ("B200", "DGX B200"),
                                                ("A100-SXM-80GB", "DGX A100")])
def test_host_dram_defaults_of_other_gpus(accelerator, system):
    d, note = _deployment(accelerator, [{"name": "host_dram"}])
    (tier,) = d.kv_cache.tiers
    assert tier.capacity_bytes == d.hw.host_memory_bytes  # one device per worker
    assert tier.bandwidth_bytes_s == d.hw.host_link_bw
    assert f"capacity and link from the {accelerator} catalog entry" in note
    assert system in note and system in tier.source


def test_host_dram_half_in_the_catalog():
    """MI300X: the host link is published, the host's memory is not (an OEM's choice): the
    capacity is required (the error names the key and the missing catalog field) and the
    link comes from the catalog. TPU v5e: the host's DRAM is published, its link is not:
    the capacity comes from the catalog and the link is the labelled assumption."""
    with pytest.raises(ScenarioError, match=r"^kv_cache.tiers.0.capacity_gb: expected GB.*"
                                            r"MI300X catalog entry has no host.memory_gb_per"):
        _deployment("MI300X", [{"name": "host_dram"}])
    d, note = _deployment("MI300X", [{"name": "host_dram", "capacity_gb": 100}])
    assert "host_dram 100 GB at 64 GB/s" in note
    assert "(link from the MI300X catalog entry: AMD Instinct MI300X datasheet" in note
    d, note = _deployment("TPU-v5e", [{"name": "host_dram"}], model="Llama-3.2-1B")
    assert "host_dram 68.72 GB at 25 GB/s" in note
    assert "capacity from the TPU-v5e catalog entry: Google Cloud TPU" in note
    assert "(assumed link default)" in note
    assert d.kv_cache.tiers[0].source.endswith("; assumed link default")


# ---------------------------------------------------------------- real traces


def _real(name: str):
    path = SHARED / "data" / "traces" / name
    if not path.is_file():
        pytest.skip(f"{path} is absent (a fresh clone has no ../shared/data; see README.md, "
                    '"Public traces: where to download them"): real-trace replay skipped')
    return path


@pytest.mark.parametrize("name,fmt", [("mooncake_conversation_trace.jsonl", "mooncake"),
                                      ("AzureLLMInferenceTrace_conv.csv", "azure")])
def test_real_traces_replay_with_the_cache(name, fmt):
    path = _real(name)
    sc = base({"prefix_cache": True, "tiers": [{"name": "host_dram", "capacity_gb": 64}]},
              hardware={"count": 4, "accelerator": "H100-SXM"},
              router={"policy": "cache_aware"})
    sc["workload"] = {"trace": {"path": str(path), "format": fmt}, "max_requests": 300}
    res = run_scenario(sc)
    m, kc = res.metrics, res.metrics["kv_cache"]
    assert m["requests_completed"] + m["requests_rejected"] == 300
    if fmt == "mooncake":  # 37% of its blocks repeat: a share of the prompts is found
        assert kc["hit_rate"]["total"] > 0.05
        assert kc["lookups"] > 250
    else:  # no prefix information: nothing to look up
        assert kc["lookups"] == 0


def test_report_shows_the_kv_cache_only_when_it_is_on(tmp_path):
    from specsim.simulator.report.report import write_report

    tr = trace([1536] * 3, [20] * 3, blocks=[(0, 1, 100 + i) for i in range(3)])
    on = run(base({"prefix_cache": True, "tiers": [HOST]}), tr)
    off = run(base(), tr)
    write_report(on, tmp_path / "on")
    write_report(off, tmp_path / "off")
    text = (tmp_path / "on" / "report.md").read_text()
    assert "## KV cache: prefix hits, tiers and transfers" in text
    assert "| hbm |" in text and "| host_dram |" in text and "2,048" in text  # 2 x 1024 hit
    assert "KV cache: prefix" not in (tmp_path / "off" / "report.md").read_text()
    assert "kv_cached_blocks" in on.iterations.columns
    assert "kv_cached_blocks" not in off.iterations.columns
