"""The design seeds' MoE pressure test: MTP vs EAGLE-3 vs DFlash (15 draft tokens) on a
35B-A3B-class MoE target at fixed concurrency (closed loop, no think time).

The scenario is ``scenarios/moe_mtp_eagle3_dflash.yaml`` (its header says what the target
proxy is and where each method's acceptance comes from). Per number of clients, each method
runs the same requests and is compared with the same run without speculation: ``thr x`` =
output tokens/s with over without (the seeds' figure of merit: output throughput), ``TPOT
x`` = mean TPOT without over with. The seeds' published order at their load is MTP 1.86x,
EAGLE-3 1.81x, DFlash 1.49x (output throughput); which concurrency that was is not stated.

DFlash's drafter: a block-diffusion model conditioned on target hidden states, one pass over
the block. Its shape for this target is assumed (5 dense layers of the target's width, the
target's vocabulary; z-lab publishes the drafter weights but no config was read here).

    python benchmarks/moe_drafters.py [--clients 1,4,16,64] [--requests 160] [--write]

``--write`` puts the table between the markers of docs/speculation.md (the default clients
and requests only); ``tests/test_docs.py`` re-runs one client and compares its rows.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from specsim import run_scenario

REPO = Path(__file__).resolve().parents[1]
SCENARIO = REPO / "scenarios" / "moe_mtp_eagle3_dflash.yaml"

#: assumed DFlash drafter for the proxy target (see the module docstring)
DFLASH_DRAFTER = {
    "name": "dflash-drafter-35b-a3b-proxy", "n_layers": 5, "hidden_size": 2048, "n_heads": 32,
    "n_kv_heads": 4, "head_dim": 128, "intermediate_size": 6144, "vocab_size": 151936,
    "tied_embeddings": True, "max_context": 40960, "params_b": 0, "moe": None,
    "mtp_layers": 0, "native_weight_format": "bf16", "tokenizer": "qwen3",
    "source": "assumed: 5 dense decoder layers of the target's width (DFlash drafters are a "
              "few layers conditioned on target hidden states; arXiv 2602.06036)"}

METHODS = {
    "mtp k=3": {"speculation.method": "mtp", "speculation.k": 3,
                "speculation.acceptance": {"profile": "qwen3.6-35b-a3b-mtp-llamacpp"}},
    "eagle3 k=3": {"speculation.method": "eagle3", "speculation.k": 3,
                   "speculation.acceptance": {"profile": "qwen3-8b-eagle3"}},
    "dflash k=15": {"speculation.method": "dflash", "speculation.k": 15,
                    "speculation.drafter": DFLASH_DRAFTER,
                    "speculation.acceptance": {"profile": "qwen3-8b-dflash"}},
}


def run(overrides: dict, clients: int, requests: int) -> dict:
    base = {"workload.closed_loop.clients": clients,
            "workload.synthetic.requests": requests,
            "simulation.progress": False, "simulation.record_iterations": False}
    return run_scenario(SCENARIO, overrides={**base, **overrides}).metrics


HEADER = ("| clients | method | tau (tok/step) | output tok/s | thr x | TPOT mean (ms) "
          "| TPOT x |\n|---:|---|---:|---:|---:|---:|---:|")
PAGE = REPO / "docs" / "speculation.md"
START = "<!-- moe-table:start (python benchmarks/moe_drafters.py --write) -->"
END = "<!-- moe-table:end -->"


def rows(n: int, requests: int) -> list[str]:
    """The table's rows for `n` clients: no speculation, then each method against it."""
    req = max(requests, 4 * n)
    off = run({"speculation.method": "none"}, n, req)
    out = [f"| {n} | none | 1.00 | {off['throughput_output_tokens_per_s']:,.0f} | 1.00 | "
           f"{off['tpot_s']['mean'] * 1e3:.2f} | 1.00 |"]
    for name, over in METHODS.items():
        m = run(over, n, req)
        thr = m["throughput_output_tokens_per_s"] / off["throughput_output_tokens_per_s"]
        tpot = off["tpot_s"]["mean"] / m["tpot_s"]["mean"]
        out.append(f"| {n} | {name} | {m['mean_acceptance_length']:.2f} | "
                   f"{m['throughput_output_tokens_per_s']:,.0f} | {thr:.2f} | "
                   f"{m['tpot_s']['mean'] * 1e3:.2f} | {tpot:.2f} |")
    return out


def page_rows(text: str) -> list[str]:
    """The table rows between the markers of the docs page."""
    body = text.split(START, 1)[1].split(END, 1)[0]
    return [ln for ln in body.splitlines() if ln.startswith("| ") and ln[2].isdigit()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", default="1,4,16,64")
    ap.add_argument("--requests", type=int, default=160)
    ap.add_argument("--write", action="store_true", help=f"replace the table in {PAGE.name}")
    args = ap.parse_args()
    if args.write and (args.clients != "1,4,16,64" or args.requests != 160):
        ap.error("--write records the default clients and requests only")
    levels = [int(c) for c in args.clients.split(",")]
    t0 = time.perf_counter()
    print(HEADER)
    lines = [HEADER]
    for n in levels:
        for line in rows(n, args.requests):
            print(line, flush=True)
            lines.append(line)
    print(f"\n({time.perf_counter() - t0:.1f} s)")
    if args.write:
        head, rest = PAGE.read_text().split(START, 1)
        tail = rest.split(END, 1)[1]
        PAGE.write_text(f"{head}{START}\n" + "\n".join(lines) + f"\n{END}{tail}")


if __name__ == "__main__":
    main()
