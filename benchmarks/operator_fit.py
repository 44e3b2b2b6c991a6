"""Operator-table fit: the GPU profiles fitted to Vidur's measured kernel tables, and how
well they hold out.

    python benchmarks/operator_fit.py                   # H100-SXM and A100-SXM-80GB
    python benchmarks/operator_fit.py --hardware h100
    python benchmarks/operator_fit.py --write-bundled   # regenerate cost_models/calibrations/

Reads ``../shared/data/gpu_profiles/vidur`` (microsoft/vidur profiling data, MIT licence;
see shared/data/README.md, section gpu_profiles); where that folder is absent it says so and
exits 0. Per op group it prints the train and held-out median / worst errors (whole models
left out in turn; TP 8 left out; long attention contexts left out) and the fitted rates
next to the catalog's datasheet peaks.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from specsim.cost_models.calibrate.profiles import (  # noqa: E402
    VIDUR_SOURCE,
    ProfileFit,
    fit_profiles,
    resolve_hardware,
    write_profile,
)

DATA = REPO.parent / "shared" / "data" / "gpu_profiles" / "vidur"
BUNDLED = REPO / "cost_models" / "calibrations"
CHIPS = ("H100-SXM", "A100-SXM-80GB")

# What these particular tables show that a generic fit cannot know (kept with the bundled
# profiles so their users see it).
VIDUR_NOTES = [
    "attention: the profiled prefill kernel's times follow the full rectangle q*(kv+q) better "
    "than the causal area q*kv+q(q+1)/2 the cost model prices (as FlashAttention with causal "
    "masking runs), so eta_attn_prefill is a compromise: it under-predicts prefill over short "
    "contexts and over-predicts it over long ones (fit_quality holdouts)",
    "all-reduce: NCCL kernel times; serving engines use a custom all-reduce for small messages "
    "on NVLink/NVSwitch, which can be faster than allreduce_latency_s says",
    "elementwise: one efficiency for norms (about half the HBM bandwidth in these tables), "
    "residual adds and rope (at or above it: inputs still in L2) and the activation; small "
    "batches run one block per token, which the per-layer floor only approximates",
]


def _row(name: str, train: dict, test: dict | None) -> str:
    def cell(s: dict | None) -> str:
        if not s or not s.get("rows"):
            return f"{'-':>19}"
        return f"{s['median_ape_pct']:6.1f} {s['p90_ape_pct']:6.1f} {s['max_ape_pct']:5.0f}"
    return f"  {name:<20} {cell(train)}   {cell(test)}"


def print_fit(fit: ProfileFit) -> None:
    v, q = fit.values, fit.quality
    models = [t.split("/")[-2] for t in fit.tables if t.startswith("compute/")]
    print(f"\n=== {fit.hardware}: {', '.join(models)}")
    print(f"fitted: eta_compute {v['eta_compute']:.3f}, matmul_half_tokens "
          f"{v['matmul_half_tokens']:.0f}, eta_memory {v['eta_memory']:.3f}, eta_elementwise "
          f"{v['eta_elementwise']:.3f}, eta_attn_prefill {v['eta_attn_prefill']:.3f}, "
          f"eta_attn_decode {v['eta_attn_decode']:.3f}")
    print(f"        per_layer_overhead {v['per_layer_overhead_s'] * 1e6:.1f} us ("
          + ", ".join(f"{k[:-2]} {s * 1e6:.1f}" for k, s in fit.floors.items())
          + f"), fixed_overhead {v['fixed_overhead_s'] * 1e6:.1f} us, all-reduce "
          f"{v['allreduce_latency_s'] * 1e6:.1f} us + ring bytes / (link x "
          f"{v['allreduce_bw_eff']:.3f})")
    hdr = f"  {'op group':<20} {'median':>6} {'p90':>6} {'worst':>5}   " \
          f"{'median':>6} {'p90':>6} {'worst':>5}   (APE %)"
    for h in q["holdouts"]:
        print(f"-- held out: {h['held_out']}")
        print(f"  {'':<20} {'train':^19}   {'held out':^19}")
        print(hdr)
        for g, s in h["test"].items():
            print(_row(g, h["train"].get(g), s))
    print("-- all rows, profile's own fit")
    for g, s in q["train_all_rows"].items():
        print(_row(g, s, None))
    print("-- fitted vs datasheet")
    for k, s in q["datasheet"].items():
        print(f"  {k:<17} " + ", ".join(f"{a} {b}" for a, b in s.items()))
    if "cross_node_allreduce" in q:
        c = q["cross_node_allreduce"]
        print(f"-- all-reduce across nodes: latency {c['latency_us']} us, NIC share "
              f"{c['nic_share']} ({c['fitted_nic_gb_s_per_device']} of "
              f"{c['catalog_nic_gb_s_per_device']} GB/s per device), median "
              f"{c['all_rows']['median_ape_pct']}%")
        for r in c["configurations"]:
            print(f"  {r['workers']:>3} workers, {r['devices_per_node']} per node: measured bus "
                  f"{r['measured_bus_gb_s_at_16MB_plus']} GB/s at >= 16 MB, median "
                  f"{r['median_ape_pct']}%")
        for r in c["leave_one_configuration_out"]:
            print(f"  held out {r['held_out']}: median {r['median_ape_pct']}%")
    if "decode_paged_kv" in q:
        d = q["decode_paged_kv"]
        for k in ("cost_model", "with_per_block_term"):
            v = d[k]
            print(f"-- decode over a paged KV cache ({k}): eta_attn_decode "
                  f"{v['eta_attn_decode']}, per block {v.get('per_block_ns', '-')} ns; mean "
                  f"error short {v['mean_ape_pct_short']}%, long {v['mean_ape_pct_long']}%, "
                  f"long held out {v['fit_short_held_out_long']['mean_ape_pct_long_held_out']}%")
    for o in q.get("other_network_tables", []):
        if "fit" in o:
            f = o["fit"]
            print(f"  (not used) {o['table']}: latency {o['allreduce_latency_us']} us, bw eff "
                  f"{o['allreduce_bw_eff']}, median {f['median_ape_pct']}%, worst "
                  f"{f['max_ape_pct']}%")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA, help=f"tables folder (default {DATA})")
    ap.add_argument("--hardware", action="append",
                    help="chip (h100, a100 or a catalog name); repeatable; default both")
    ap.add_argument("--write-bundled", action="store_true",
                    help="(re)write cost_models/calibrations/<hardware>.yaml from this fit")
    args = ap.parse_args(argv)
    if not args.data.is_dir():
        print(f"operator_fit: {args.data} is absent; nothing to fit. Get microsoft/vidur's "
              "data/profiling folder (MIT licence) and pass --data, or see "
              "shared/data/README.md (gpu_profiles).")
        return 0
    chips = [resolve_hardware(h)[0] for h in args.hardware] if args.hardware else list(CHIPS)
    for hw in chips:
        source = VIDUR_SOURCE if args.data.resolve() == DATA.resolve() else None
        fit = fit_profiles(args.data, hw, source=source, notes=VIDUR_NOTES if source else None)
        print_fit(fit)
        if args.write_bundled:
            out = write_profile(fit.profile(), BUNDLED / f"{hw}.yaml", force=True)
            print(f"wrote {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
