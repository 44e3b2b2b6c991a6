"""``specsim sensitivity``: the command-line face of ``planning.sensitivity`` (imports lazy)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def add_sensitivity_command(sub) -> None:
    from specsim import flags

    p = sub.add_parser(
        "sensitivity", help="which uncertain input decides a run's answer, and where it flips",
        description="Re-simulate a scenario with each uncertain input (cost-model parameters, "
                    "speculation costs, acceptance per class, price, power) moved across its "
                    "stated band: a tornado (one at a time), optionally Morris or Sobol "
                    "indices (joint, SALib), and for a gain over a second choice (speculation "
                    "off by default) each input's break-even value.",
        epilog="example: specsim sensitivity scenarios/chat.yaml --output tpot_p99 "
               "--out runs/sens")
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument("--output", default="tpot_p99",
                   help="tpot_mean, tpot_p50, tpot_p99, ttft_p99, e2e_p99, goodput, "
                        "throughput, usd_per_mtok, j_per_token, or capacity (the largest "
                        "rate one replica sustains within --slo, as the planner finds it; "
                        "default tpot_p99)")
    p.add_argument("--slo", action="append", default=[], metavar="NAME=SECONDS",
                   help="with --output capacity: an SLO the capacity is measured within "
                        "(repeatable; names as specsim plan's --slo, e.g. tpot_p99=0.02)")
    p.add_argument("--method", default="oat", help="oat (tornado only, default), morris "
                   "or sobol (joint indices as well)")
    p.add_argument("--samples", type=flags.positive_int, default=None,
                   help="Morris trajectories (default 8) or Sobol base N, a power of two "
                        "(default 8): small, so indices are rough (their confidence is shown)")
    p.add_argument("--versus", action="append", default=[], metavar="KEY=VALUE",
                   help="the second choice the gain is over (repeatable; default "
                        "speculation.method=none)")
    p.add_argument("--absolute", action="store_true",
                   help="analyse the output itself, not a gain (no break-even)")
    p.add_argument("--requests", type=flags.positive_int, default=300,
                   help="requests per run (workload.max_requests; default 300)")
    p.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a scenario key (repeatable), validated like the file")
    p.add_argument("--seed", type=flags.seed, help="override the scenario's seed")
    p.add_argument("--out", help="folder for sensitivity.csv and tornado.png: new or empty "
                   "(a previous specsim output only with --force)")
    p.add_argument("--force", action="store_true",
                   help="replace a previous specsim output in --out (never other files)")
    p.set_defaults(func=cmd_sensitivity)


def parse_versus(items: list[str]) -> dict | None:
    from specsim.simulator.scenario.config import parse_override

    if not items:
        return {"speculation.method": "none"}
    return {".".join(map(str, k)): v for k, v in map(parse_override, items)}


def cmd_sensitivity(args: argparse.Namespace) -> int:
    from specsim.errors import ScenarioError
    from specsim.outputs import check_folder, escape_frame, write_folder
    from specsim.simulator.planning import sensitivity as sens

    if args.method not in sens.METHODS:
        raise ScenarioError(f"--method {args.method}: expected one of "
                            f"{', '.join(sens.METHODS)}")
    if args.output not in sens.OUTPUTS:
        raise ScenarioError(f"--output {args.output}: expected one of "
                            f"{', '.join(sens.OUTPUTS)}")
    if args.absolute and args.versus:
        raise ScenarioError("--versus: not with --absolute (a gain needs a second choice)")
    out = Path(args.out) if args.out else None
    if out is not None:  # refused before any simulating
        check_folder(out, args.force)
    t0 = time.perf_counter()
    versus = None if args.absolute else parse_versus(args.versus)
    from specsim.simulator.planning.plan import parse_slos

    slos = parse_slos(args.slo) if args.slo else None
    with sens.Model(args.scenario, output=args.output, versus=versus, overrides=args.set,
                    requests=args.requests, seed=args.seed, slos=slos) as model:
        if versus is not None:  # a mistyped --versus value: one line before the analysis
            model.run(dict(versus))
        an = sens.analyse(model, args.method, args.samples)
    wall = time.perf_counter() - t0
    print(f"sensitivity of {an.label} ({args.scenario}, {args.requests} requests per run)")
    print(f"nominal {an.nominal:.4g}; {an.runs} runs in {wall:.1f} s")
    print(sens.text_table(an))
    flips = an.flips()
    if an.is_gain:
        print("inputs whose band holds a break-even (their uncertainty can flip the "
              "decision): " + (", ".join(b.input.name for b in flips) or "none"))
    if out is not None:
        df = an.frame()

        def fill(tmp: Path) -> None:
            escape_frame(df).to_csv(tmp / "sensitivity.csv", index=False)
            sens.tornado_png(an, tmp / "tornado.png",
                             f"{Path(args.scenario).name}: one input at a time")

        write_folder(out, fill, args.force, written_by="specsim sensitivity",
                     scenario=str(args.scenario))
        print(f"wrote {out / 'sensitivity.csv'}, {out / 'tornado.png'}")
    return 0
