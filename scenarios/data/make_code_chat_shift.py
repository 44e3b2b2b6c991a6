"""Writes code_chat_shift.csv: adaptive_code_vs_chat.yaml's requests (the same synthetic
workload: seed 7, 1,000 requests, Poisson 5.5 req/s, ShareGPT-like lengths, 30% code / 70%
chat) with one change: chat requests arriving in [60 s, 120 s) are sampled at temperature 1
(the others greedy, 0), so a drafter whose acceptance falls with temperature collapses for
chat in the middle of the run. Run from the repository root:
``python scenarios/data/make_code_chat_shift.py``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specsim.simulator.cluster.engine import build_trace, load_scenario

HERE = Path(__file__).resolve().parent
SHIFT = (60.0, 120.0)  # seconds: chat at temperature 1 (assumed shift)


def main() -> None:
    sc, base, _ = load_scenario(HERE.parent / "adaptive_code_vs_chat.yaml")
    df = build_trace(sc, base, 40960)
    chat = df.workload_class == "chat"
    hot = chat & (df.arrival_s >= SHIFT[0]) & (df.arrival_s < SHIFT[1])
    out = df[["arrival_s", "prompt_tokens", "output_tokens", "workload_class"]].copy()
    out["temperature"] = np.where(hot, 1.0, 0.0)
    out["arrival_s"] = out["arrival_s"].round(6)
    out.to_csv(HERE / "code_chat_shift.csv", index=False)
    print(f"{len(out)} requests, {int(hot.sum())} chat at temperature 1")


if __name__ == "__main__":
    main()
