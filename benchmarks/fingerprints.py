"""Fingerprints of every bundled scenario: metrics, requests and iteration log, per backend.

A refactor that must not change results (the kernel, the fleet) runs this before and after
and compares: ``python benchmarks/fingerprints.py --save before.json`` then
``python benchmarks/fingerprints.py --compare before.json``. Wall-clock fields are left out
of the metrics hash (they are the only values allowed to differ between two runs).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
WALL_KEYS = ("wall", "sim_speed", "realtime", "elapsed")


def _strip(d):
    if isinstance(d, dict):
        return {k: _strip(v) for k, v in d.items() if not any(w in k for w in WALL_KEYS)}
    if isinstance(d, list):
        return [_strip(v) for v in d]
    return d


def _hash_frame(df: pd.DataFrame | None) -> str:
    if df is None:
        return "none"
    h = hashlib.sha256()
    h.update(",".join(map(str, df.columns)).encode())
    h.update(pd.util.hash_pandas_object(df, index=False).values.tobytes())
    return h.hexdigest()[:16]


def fingerprint(path: Path, compiled: bool) -> dict[str, str]:
    from specsim.simulator.cluster.engine import finite_or_none, run_scenario

    ov = [f"simulation.compiled={str(compiled).lower()}"]
    r = run_scenario(path, overrides=ov)
    m = json.dumps(finite_or_none(_strip(r.metrics)), sort_keys=True, default=str)
    return {"metrics": hashlib.sha256(m.encode()).hexdigest()[:16],
            "requests": _hash_frame(r.requests), "iterations": _hash_frame(r.iterations)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--save", help="write the fingerprints to this JSON file")
    ap.add_argument("--compare", help="compare with fingerprints saved earlier")
    ap.add_argument("--only", nargs="*", help="scenario file stems to run (default: all)")
    args = ap.parse_args()
    out: dict[str, dict[str, str]] = {}
    for p in SCENARIOS:
        if args.only and p.stem not in args.only:
            continue
        for compiled in (False, True):
            key = f"{p.stem}/{'compiled' if compiled else 'numpy'}"
            try:
                out[key] = fingerprint(p, compiled)
            except Exception as exc:  # noqa: BLE001 - reported per row
                out[key] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
            print(key, out[key], flush=True)
    if args.save:
        Path(args.save).write_text(json.dumps(out, indent=1, sort_keys=True))
    if args.compare:
        before = json.loads(Path(args.compare).read_text())
        bad = [k for k in out if before.get(k) != out[k]]
        for k in bad:
            print(f"DIFFERS {k}: before {before.get(k)} now {out[k]}")
        print(f"{len(out) - len(bad)}/{len(out)} identical")
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
