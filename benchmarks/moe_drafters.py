"""The design seeds' MoE pressure test: MTP vs EAGLE-3 vs DFlash on Qwen3.6-35B-A3B (the
seeds' own target: 3 Gated DeltaNet : 1 gated full-attention layers, 256 experts, 8 routed +
1 shared, one MTP module) at fixed concurrency (closed loop, no think time).

The scenario is ``scenarios/moe_mtp_eagle3_dflash.yaml`` (its workload, SLO and scheduler);
this benchmark replaces its proxy target with the catalog's Qwen3.6-35B-A3B (layer kinds,
docs/architecture.md) on 2x H100 at tensor_parallel 2 (its 69 GB of bf16 weights do not fit
one H100 at memory_fraction 0.9), with ``scheduler.max_batch`` = the clients (a closed loop
never runs more sequences; the linear layers' states are set aside for max_batch sequences).
Per number of clients, each method runs the same requests and is compared with the same run
without speculation: ``thr x`` = output tokens/s with over without (the seeds' figure of
merit), ``TPOT x`` = mean TPOT without over with. The seeds measured MTP 1.86x, EAGLE-3
1.81x, DFlash 1.49x (output throughput; their load and hardware are not stated).

Acceptance (workload class chat; each profile names its source):
- mtp: ``qwen3.6-35b-a3b-mtp-llamacpp``, measured on this model (llama.cpp, k=4; applied at
  k=3, derived).
- eagle3: ``qwen3.5-397b-a17b-eagle3-aqmedai``, BORROWED from the same architecture's
  397B-A17B sibling (SGLang, MT-Bench tau 3.03; at_k 3 assumed): no public EAGLE-3
  measurement on the 35B-A3B was found.
- dflash: ``qwen3.6-35b-a3b-dflash-vllm``, measured on this model with z-lab's drafter (vLLM,
  8 drafts, UltraChat, NVFP4 target); k=8 as measured, k=15 (the seeds' block of 16) with
  the 8th position's conditional rate held beyond it (derived).

DFlash's drafter: the catalog's Qwen3.6-35B-A3B-DFlash (z-lab's config.json: 8 Qwen3 layers,
hidden 2048, 32 heads, 4 KV heads of 128, intermediate 6144, vocabulary 248320), one pass over
the block.

    python benchmarks/moe_drafters.py [--clients 1,2,4,8,16,32,64] [--requests 160] [--write]

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

#: the real target (catalog entry, with its sources) on a group its bf16 weights fit
TARGET = {"model": "Qwen3.6-35B-A3B", "hardware.count": 2, "hardware.tensor_parallel": 2}

#: z-lab/Qwen3.6-35B-A3B-DFlash: the catalog entry (its config.json, cited there)
DFLASH_DRAFTER = "Qwen3.6-35B-A3B-DFlash"

DFLASH_ACC = {"profile": "qwen3.6-35b-a3b-dflash-vllm"}
METHODS = {
    "mtp k=3": {"speculation.method": "mtp", "speculation.k": 3,
                "speculation.acceptance": {"profile": "qwen3.6-35b-a3b-mtp-llamacpp"}},
    "eagle3 k=3": {"speculation.method": "eagle3", "speculation.k": 3,
                   "speculation.acceptance": {"profile": "qwen3.5-397b-a17b-eagle3-aqmedai"}},
    "dflash k=8": {"speculation.method": "dflash", "speculation.k": 8,
                   "speculation.drafter": DFLASH_DRAFTER, "speculation.acceptance": DFLASH_ACC},
    "dflash k=15": {"speculation.method": "dflash", "speculation.k": 15,
                    "speculation.drafter": DFLASH_DRAFTER, "speculation.acceptance": DFLASH_ACC},
}
#: the seeds' measured output-throughput gains (design seeds; load and hardware not stated)
SEED = {"mtp": 1.86, "eagle3": 1.81, "dflash": 1.49}
LEVELS = (1, 2, 4, 8, 16, 32, 64)


def run(overrides: dict, clients: int, requests: int) -> dict:
    base = {**TARGET, "scheduler.max_batch": clients,
            "workload.closed_loop.clients": clients,
            "workload.synthetic.requests": requests,
            "simulation.progress": False, "simulation.record_iterations": False}
    return run_scenario(SCENARIO, overrides={**base, **overrides}).metrics


HEADER = ("| clients | method | tau (tok/step) | output tok/s | thr x | seeds' thr x "
          "| TPOT mean (ms) | TPOT x |\n|---:|---|---:|---:|---:|---:|---:|---:|")
PAGE = REPO / "docs" / "speculation.md"
START = "<!-- moe-table:start (python benchmarks/moe_drafters.py --write) -->"
END = "<!-- moe-table:end -->"


def rows(n: int, requests: int, gains: dict | None = None) -> list[str]:
    """The table's rows for `n` clients: no speculation, then each method against it
    (``gains``, if given, gets each method's throughput gain at `n`)."""
    req = max(requests, 4 * n)
    off = run({"speculation.method": "none"}, n, req)
    out = [f"| {n} | none | 1.00 | {off['throughput_output_tokens_per_s']:,.0f} | 1.00 | - | "
           f"{off['tpot_s']['mean'] * 1e3:.2f} | 1.00 |"]
    for name, over in METHODS.items():
        m = run(over, n, req)
        thr = m["throughput_output_tokens_per_s"] / off["throughput_output_tokens_per_s"]
        tpot = off["tpot_s"]["mean"] / m["tpot_s"]["mean"]
        if gains is not None:
            gains[(n, name)] = thr
        seed = SEED[name.split()[0]]
        out.append(f"| {n} | {name} | {m['mean_acceptance_length']:.2f} | "
                   f"{m['throughput_output_tokens_per_s']:,.0f} | {thr:.2f} | {seed:.2f} | "
                   f"{m['tpot_s']['mean'] * 1e3:.2f} | {tpot:.2f} |")
    return out


def order_lines(gains: dict, levels: list[int]) -> list[str]:
    """Per number of clients, the methods by throughput gain and whether the seeds' order
    (MTP > EAGLE-3 > DFlash, DFlash at the seeds' 15 drafts) holds there."""
    out = []
    for n in levels:
        g = {name: gains[(n, name)] for name in METHODS if (n, name) in gains}
        if not g:
            continue
        ranked = sorted(g, key=lambda k: -g[k])
        holds = g["mtp k=3"] > g["eagle3 k=3"] > g["dflash k=15"]
        out.append(f"- {n} clients: " + " > ".join(f"{k} {g[k]:.2f}x" for k in ranked)
                   + f"; seeds' order {'holds' if holds else 'does not hold'}")
    return out


def page_rows(text: str) -> list[str]:
    """The table rows between the markers of the docs page."""
    body = text.split(START, 1)[1].split(END, 1)[0]
    return [ln for ln in body.splitlines() if ln.startswith("| ") and ln[2].isdigit()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", default=",".join(map(str, LEVELS)))
    ap.add_argument("--requests", type=int, default=160)
    ap.add_argument("--write", action="store_true", help=f"replace the table in {PAGE.name}")
    args = ap.parse_args()
    if args.write and (args.clients != ",".join(map(str, LEVELS)) or args.requests != 160):
        ap.error("--write records the default clients and requests only")
    levels = [int(c) for c in args.clients.split(",")]
    t0 = time.perf_counter()
    print(HEADER)
    lines = [HEADER]
    gains: dict = {}
    for n in levels:
        for line in rows(n, args.requests, gains):
            print(line, flush=True)
            lines.append(line)
    summary = order_lines(gains, levels)
    print("\n" + "\n".join(summary))
    print(f"\n({time.perf_counter() - t0:.1f} s)")
    if args.write:
        head, rest = PAGE.read_text().split(START, 1)
        tail = rest.split(END, 1)[1]
        PAGE.write_text(f"{head}{START}\n" + "\n".join(lines) + "\n\n" + "\n".join(summary)
                        + f"\n{END}{tail}")


if __name__ == "__main__":
    main()
