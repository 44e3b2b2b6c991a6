"""``calibrate --model NAME``: a model's own shape timed on this device and fitted (issue 23
part 4). The GPU path runs only where a GPU is; here the same code runs on CPU at a tiny
shape, and ``--device cuda`` without a GPU is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="calibrate --model needs the calibrate extra "
                                            "(torch)")

from specsim.cost_models.calibrate.model_run import resolve_model  # noqa: E402
from specsim.cost_models.calibrate.shape_bench import (  # noqa: E402
    ShapeGrid,
    ShapeStack,
    plan_layers,
    time_model,
)
from specsim.cost_models.calibrate.steps import read_steps  # noqa: E402
from specsim.cost_models.calibration import load_profile  # noqa: E402
from specsim.simulator.cli import main  # noqa: E402

TINY = """name: tiny-llama
n_layers: 4
hidden_size: 64
n_heads: 4
n_kv_heads: 2
head_dim: 16
intermediate_size: 128
vocab_size: 256
tied_embeddings: true
max_context: 4096
params_b: 0.0001
"""
TINY_MOE = TINY.replace("tiny-llama", "tiny-moe").replace(
    "intermediate_size: 128\n", "intermediate_size: 0\nmoe:\n  n_experts: 4\n  top_k: 2\n"
    "  expert_intermediate_size: 32\n  n_shared_experts: 1\n"
    "  shared_expert_intermediate_size: 32\n")
GRID = ShapeGrid((1, 2), (1, 3), (8, 24), ((1, 16, 0), (2, 16, 0), (1, 8, 16)), 1, 2)


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    p = tmp_path / "tiny.yaml"
    p.write_text(TINY)
    return p


def test_cuda_without_a_gpu_is_one_line(tiny: Path, tmp_path: Path, capsys) -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the refusal is for machines without one")
    out = tmp_path / "p.yaml"
    assert main(["calibrate", "--device", "cuda", "--model", str(tiny), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sees no CUDA device" in err[0]
    assert not out.exists() and not list(tmp_path.glob("*steps*"))


@pytest.mark.parametrize("ref, expected", [
    ("No-Such-Model", "'No-Such-Model' is not a catalog model"),
    ("missing.yaml", "missing.yaml"),
])
def test_a_bad_model_is_one_line_before_any_timing(ref: str, expected: str, tmp_path: Path,
                                                   capsys) -> None:
    assert main(["calibrate", "--model", ref, "--out", str(tmp_path / "p.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0]


def test_cpu_path_times_fits_and_writes_a_loadable_profile(tiny: Path, tmp_path: Path,
                                                          capsys) -> None:
    out = tmp_path / "cpu.yaml"
    assert main(["calibrate", "--device", "cpu", "--model", str(tiny), "--quick", "--dtype",
                 "float32",
                 "--out", str(out), "--name", "tiny-cpu"]) == 0
    said = capsys.readouterr().out
    assert "held out 5-fold rows" in said and "measured ceilings" in said
    steps, info, skipped = read_steps(tmp_path / "cpu-steps.jsonl")
    assert info["device"] and info["matmul_tflops"] > 0 and info["copy_gb_s"] > 0
    kinds = {s.kind for s in steps}
    assert kinds == {"decode", "prefill"} and skipped == 0
    assert any(s.kind == "prefill" and s.context > 0 for s in steps)  # a chunk over a cache
    cal = load_profile(str(out))
    assert cal.name == "tiny-cpu" and cal.eta_compute > 0
    # the profile carries the measured CPU as a hardware entry a scenario can price with
    import yaml

    from specsim.cost_models.calibrate.fit import hardware_from_profile
    doc = yaml.safe_load(out.read_text())
    hw = hardware_from_profile(doc)
    assert hw.hbm_bw == pytest.approx(info["copy_gb_s"] * 1e9, rel=1e-3)
    assert doc["fit_quality"]["holdouts"]


def test_fewer_layers_are_scaled_to_the_models_depth(tiny: Path) -> None:
    spec = resolve_model(str(tiny))
    recs = time_model(spec, GRID, "cpu", "float32", layers=2)
    assert all("error" not in r for r in recs)
    for r in recs:
        s = r["scaled_from"]
        assert s["layers"] == 2
        assert r["seconds"] == pytest.approx(
            s["head_only_s"] + spec.n_layers / 2 * max(s["seconds"] - s["head_only_s"], 0.0))
    assert {(r["kind"], r["batch"]) for r in recs} >= {("decode", 1), ("decode", 2),
                                                      ("prefill", 2)}


def test_all_layers_when_they_fit_and_the_cache_budget_skips_cleanly(tiny: Path,
                                                                     tmp_path: Path) -> None:
    spec = resolve_model(str(tiny))
    dev = torch.device("cpu")
    assert plan_layers(spec, dev, torch.float32, None).layers == spec.n_layers
    assert plan_layers(spec, dev, torch.float32, 99).layers == spec.n_layers
    recs = time_model(spec, GRID, "cpu", "float32", kv_budget_share=1e-15)
    assert recs and all(r["error"].startswith("skipped: KV cache") for r in recs)
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in recs[:2]
                         + [{"kind": "decode", "model": "tiny-llama", "batch": 1, "q": 1,
                             "context": 8, "seconds": 0.01}]))
    steps, _, skipped = read_steps(p)
    assert skipped == 2 and len(steps) == 1


def test_moe_layers_route_every_token_to_top_k_experts(tmp_path: Path) -> None:
    p = tmp_path / "moe.yaml"
    p.write_text(TINY_MOE)
    spec = resolve_model(str(p))
    stack = ShapeStack(spec, 2, torch.float32, "cpu")
    assert "experts_down" in stack.blocks[0] and "down" in stack.blocks[0]  # shared expert
    stack.alloc_cache(3, 16)
    with torch.inference_mode():
        out = stack.forward(torch.zeros((3, 4), dtype=torch.long), 8, last_only=False)
    assert out.shape == (3, 4)
    # the head alone: 0 layers still prices the embedding, norm and LM head
    head = ShapeStack(spec, 0, torch.float32, "cpu")
    head.alloc_cache(1, 4)
    assert head.forward(torch.zeros((1, 2), dtype=torch.long), 0, True).shape == (1, 1)
    assert head.weight_bytes() < stack.weight_bytes()
