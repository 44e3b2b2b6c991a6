"""``specsim advise``: the command line and the one-page report of ``planning.advise``."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any


def add_advise_command(sub) -> None:
    from specsim import flags

    p = sub.add_parser(
        "advise", help="per traffic class: speculate or not, with what, how sure, and how to "
                       "roll it out",
        description="Per workload class: the recommendation (speculate or not, drafter, k, a "
                    "per-class mix), its gain in TPOT, goodput, $/M tokens and J/token with a "
                    "P10-P90 band, the load where the gain crosses 1, the inputs that flip "
                    "the decision with their break-even values, the A/B size and rollout "
                    "order, and the vLLM / SGLang flags to deploy it.",
        epilog="default space: no speculation vs the scenario's drafter at k = 2, 4, 6 and "
               "the scenario's k\nexample: specsim advise scenarios/chat.yaml --out runs/advice",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument("--space", metavar="FILE", help="YAML mapping of scenario keys to lists of "
                   "values (crossed), e.g. {speculation.method: [eagle3, ngram], "
                   "speculation.k: [2, 4]}; no speculation is always a candidate")
    p.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a scenario key (repeatable), validated like the file")
    p.add_argument("--seed", type=flags.seed, help="override the scenario's seed")
    p.add_argument("--requests", type=flags.positive_int, default=300,
                   help="requests per run (workload.max_requests; default 300)")
    p.add_argument("--draws", type=flags.integer(2, 200, what="a number of draws"), default=8,
                   help="runs (seeds, acceptance draws) behind each P10-P90 band (default 8)")
    p.add_argument("--no-tornado", action="store_true",
                   help="skip the sensitivity tornado and break-evens")
    p.add_argument("--no-loads", action="store_true",
                   help="skip the load where the gain crosses 1")
    p.add_argument("--json", action="store_true", help="print the advice as JSON")
    p.add_argument("--out", help="folder for report.md, report.html, advise.json, "
                   "sensitivity.csv and plots: new or empty (a previous specsim output only "
                   "with --force)")
    p.add_argument("--force", action="store_true",
                   help="replace a previous specsim output in --out (never other files)")
    p.set_defaults(func=cmd_advise)


def cmd_advise(args: argparse.Namespace) -> int:
    from specsim.outputs import check_folder, escape_frame, write_folder
    from specsim.simulator.planning import advise as adv
    from specsim.simulator.planning.plan import read_space

    out = Path(args.out) if args.out else None
    if out is not None:  # refused before any simulating
        check_folder(out, args.force)
    space = read_space(args.space) if args.space else None
    a = adv.advise(args.scenario, space=space, overrides=args.set, requests=args.requests,
                   seed=args.seed, draws=args.draws,
                   load_factors=None if args.no_loads else adv.LOAD_FACTORS,
                   tornado=not args.no_tornado)
    doc = a.to_dict()
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(summary_text(a))
    if out is not None:
        def fill(tmp: Path) -> None:
            from specsim.simulator.report.html import markdown_to_html

            (tmp / "advise.json").write_text(json.dumps(doc, indent=1) + "\n")
            pngs = []
            if a.sensitivity is not None:
                from specsim.simulator.planning.sensitivity import tornado_png

                escape_frame(a.sensitivity.frame()).to_csv(tmp / "sensitivity.csv",
                                                           index=False)
                tornado_png(a.sensitivity, tmp / "tornado.png",
                            "what moves the TPOT gain, one input at a time")
                pngs.append("tornado.png")
            if a.loads:
                load_png(a, tmp / "gain_vs_load.png")
                pngs.append("gain_vs_load.png")
            md = report_md(a, pngs)
            (tmp / "report.md").write_text(md)
            (tmp / "report.html").write_text(markdown_to_html(md, tmp, "specsim advise"))

        write_folder(out, fill, args.force, written_by="specsim advise",
                     scenario=str(args.scenario))
        if not args.json:
            print(f"wrote {out}/report.md, report.html, advise.json")
    return 0


def _band(b: list[float]) -> str:
    if not b:
        return "-"
    return f"{b[1]:.3f} ({b[0]:.3f}-{b[2]:.3f})"


def _q(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.3g}"


def summary_text(a: Any) -> str:
    lines = [f"advice for {a.scenario} (seed {a.seed}, {a.rate_qps:.3g} req/s, {a.requests} "
             f"requests per run): {a.runs} runs in {a.wall_s:.1f} s",
             "candidates: " + "; ".join(a.candidates), ""]
    for c in a.classes:
        verdict = f"speculate: {c.choice}" if c.speculate else "do not speculate"
        lines.append(f"{c.cls}: {verdict}")
        lines.append(f"  TPOT gain P50 (P10-P90) {_band(c.band.get('tpot', []))}, goodput "
                     f"{_band(c.band.get('goodput', []))}, $/M tokens "
                     f"{_band(c.band.get('usd_per_mtok', []))}, J/token "
                     f"{_band(c.band.get('j_per_token', []))}; P(TPOT gain > 1) "
                     f"{c.p_gain:.2f}")
        lines.append(f"  why: {c.why}")
        lines.append(f"  load: {c.crossing_note}")
        if c.speculate:
            lines.append(f"  vLLM: {c.flags.get('vllm')}")
            lines.append(f"  SGLang: {c.flags.get('sglang')}")
    if a.sensitivity is not None:
        flips = a.sensitivity.flips()
        lines.append("")
        lines.append("inputs whose band holds a break-even (can flip the decision): "
                     + (", ".join(f"{b.input.name} at {b.break_even.value:.4g}"
                                  for b in flips) or "none"))
        top = a.sensitivity.bars[:3]
        lines.append("largest swings: " + ", ".join(
            f"{b.input.name} ({b.at_low:.3f}..{b.at_high:.3f})" for b in top))
    if a.ab is not None:
        lines += ["", a.ab["table"]]
    if a.per_class_yaml is not None:
        lines += ["", "per-class mix (speculation keys): " + json.dumps(a.per_class_yaml)]
    lines += ["", *(f"note: {n}" for n in a.notes)]
    return "\n".join(lines)


def report_md(a: Any, pngs: list[str]) -> str:
    """One page: the verdict per class, why, its band, load, drivers, A/B, flags."""
    from specsim.outputs import md_text
    from specsim.simulator.planning.sensitivity import text_table

    md = [f"# specsim advise: {md_text(a.scenario)}", "",
          f"Seed {a.seed}; the scenario's load {a.rate_qps:.3g} req/s; {a.requests} requests "
          f"per run; {a.runs} runs in {a.wall_s:.1f} s. Candidates: "
          + "; ".join(md_text(c) for c in a.candidates) + ".", "",
          "## Recommendation per class", "",
          "| class | verdict | TPOT gain P50 (P10-P90) | goodput gain | $/M tokens gain | "
          "J/token gain | P(TPOT gain > 1) | load where the gain crosses 1 |",
          "|---|---|---|---|---|---|---:|---|"]
    for c in a.classes:
        verdict = f"speculate: {md_text(c.choice)}" if c.speculate else "do not speculate"
        md.append(f"| {md_text(c.cls)} | {verdict} | {_band(c.band.get('tpot', []))} | "
                  f"{_band(c.band.get('goodput', []))} | "
                  f"{_band(c.band.get('usd_per_mtok', []))} | "
                  f"{_band(c.band.get('j_per_token', []))} | {c.p_gain:.2f} | "
                  f"{_q(c.crossing_qps) + ' req/s' if c.crossing_qps else 'none in the grid'} |")
    md += ["", "Gains are without speculation over with it (TPOT, $/M tokens, J/token) or "
           "with over without (goodput): above 1, speculation is better.", ""]
    for c in a.classes:
        tau = c.tau
        tau_s = (f" tau at k {tau['nominal']:.3f}, band {tau['low']:.3f}-{tau['high']:.3f} "
                 f"({md_text(tau['source'])})." if tau else "")
        md.append(f"- **{md_text(c.cls)}**: {md_text(c.why)}.{tau_s} Load: "
                  f"{md_text(c.crossing_note)}.")
    md += ["", "## Candidates: TPOT gain per class (one run each, same trace and seed)", ""]
    labels = list(a.classes[0].candidates) if a.classes else []
    md.append("| class | " + " | ".join(md_text(x) for x in labels) + " |")
    md.append("|---|" + "---:|" * len(labels))
    for c in a.classes:
        md.append(f"| {md_text(c.cls)} | " + " | ".join(f"{c.candidates[x]:.3f}"
                                                       for x in labels) + " |")
    if "gain_vs_load.png" in pngs:
        md += ["", "## Gain against load", "", "![TPOT gain against load](gain_vs_load.png)"]
    if a.sensitivity is not None:
        md += ["", "## What flips the decision", "",
               f"{md_text(a.sensitivity.label)}: nominal {a.sensitivity.nominal:.4g}. Each "
               "input at the low and high of its band, the others nominal; the break-even "
               "is where the gain is 1, found by bisection with re-simulation (same seed).",
               "", text_table(a.sensitivity)]
        if "tornado.png" in pngs:
            md += ["", "![tornado](tornado.png)"]
    if a.ab is not None:
        md += ["", "## A/B size and rollout order", "", "```", a.ab["table"], "```"]
    md += ["", "## Deploy it", ""]
    for c in a.classes:
        if c.speculate:
            md.append(f"- {md_text(c.cls)}: vLLM `{md_text(c.flags.get('vllm'))}`; SGLang "
                      f"`{md_text(c.flags.get('sglang'))}`")
        else:
            md.append(f"- {md_text(c.cls)}: no speculation")
    if a.per_class_yaml is not None:
        md += ["", "In specsim, the per-class mix: `speculation: "
               + md_text(json.dumps(a.per_class_yaml)) + "`"]
    md += ["", "## Notes", "", *(f"- {md_text(n)}" for n in a.notes), ""]
    return "\n".join(md)


def load_png(a: Any, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for lb, d in a.loads.items():
        for cls in a.classes:
            ys = [p.get(cls.cls, math.nan) for p in d["tpot_gain"]]
            ax.plot(d["qps"], ys, marker="o", label=f"{cls.cls}: {lb}")
    ax.axhline(1.0, color="red", linestyle="--", linewidth=1, label="gain 1")
    ax.axvline(a.rate_qps, color="grey", linestyle=":", linewidth=1,
               label=f"scenario load {a.rate_qps:.3g} req/s")
    ax.set_xscale("log")
    ax.set_xlabel("arrival rate (req/s, log scale)")
    ax.set_ylabel("TPOT gain over no speculation (x)")
    ax.set_title("where the speculation gain crosses 1")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
