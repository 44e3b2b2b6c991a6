"""The ``specsim`` command line: a thin layer over the Python API.

User errors (bad scenario, unknown catalog name, bad trace) print one line,
``specsim: error: ...``, and exit with status 2; nothing is written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from rich.table import Table


def _err_console():
    """Notes and 'wrote ...' lines on stderr, never wrapped (a path cut across lines cannot
    be copied, and a test looking for a phrase must not depend on the path's length)."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)


def _fmt(x, scale: float = 1.0, digits: int = 2) -> str:
    if x is None or x != x:
        return "-"
    return f"{x * scale:,.{digits}f}"


def summary_table(metrics: Any) -> Table:
    """The summary a person reads after a run: latency, then throughput, speculation, cost."""
    from rich.table import Table

    from specsim.simulator.metrics.run_metrics import RunMetrics

    m = RunMetrics.from_summary(metrics)  # read by attribute
    tab = Table(title=f"specsim: {m.scenario} (seed {m.seed})", show_header=True)
    tab.add_column("metric")
    tab.add_column("mean", justify="right")
    tab.add_column("p50", justify="right")
    tab.add_column("p90", justify="right")
    tab.add_column("p99", justify="right")
    for d, label, s in ((m.ttft_s.model_dump(), "TTFT (ms)", 1e3),
                        (m.tpot_s.model_dump(), "TPOT (ms)", 1e3), (m.itl_s, "ITL (ms)", 1e3),
                        (m.e2e_s.model_dump(), "E2E (s)", 1.0)):
        tab.add_row(label, *(_fmt(d[q], s) for q in ("mean", "p50", "p90", "p99")))
    facts = Table(show_header=True)
    facts.add_column("run summary")
    facts.add_column("value", justify="right")
    rows = [
        ("requests arrived / completed / rejected / in flight",
         f"{m.requests_arrived} / {m.requests_completed} / {m.requests_rejected} / "
         f"{m.requests_in_flight}"),
        ("longer than the context: truncated / dropped",
         f"{m.requests_truncated_to_context or 0} / {m.requests_dropped_for_context or 0}"),
        ("output tokens", f"{m.output_tokens:,}"),
        ("throughput (output tok/s)", _fmt(m.throughput_output_tokens_per_s, 1, 1)),
        ("goodput (req/s meeting SLOs)", _fmt(m.goodput_requests_per_s, 1, 3)),
        ("mean acceptance length (tok/step)", _fmt(m.mean_acceptance_length, 1, 3)),
        ("acceptance rate", _fmt(m.acceptance_rate, 1, 3)),
        ("draft / verify time fraction",
         f"{_fmt(m.draft_time_fraction, 1, 3)} / {_fmt(m.verify_time_fraction, 1, 3)}"),
        ("KV peak utilization", _fmt(m.kv_peak_utilization, 1, 3)),
        ("$ per million output tokens", _fmt(m.cost_usd_per_million_output_tokens, 1, 3)),
        ("energy per output token (J)", _fmt(m.energy_j_per_output_token, 1, 3)),
        ("simulated time (s) / wall time (s)",
         f"{_fmt(m.simulated_time_s, 1, 1)} / {_fmt(m.wall_time_s, 1, 2)}"),
        ("cost model", m.calibration),
    ]
    for label, value in rows:
        facts.add_row(label, value)
    grid = Table.grid()
    grid.add_row(tab)
    grid.add_row(facts)
    return grid


def _progress_bar(total_requests: int):
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = _err_console()

    # off a terminal the bar is off: rich's stop would add a blank line before an error
    prog = Progress(TextColumn("simulating"), BarColumn(), TextColumn("{task.completed}/"
                    "{task.total} arrivals"), TextColumn("t={task.fields[sim_t]:.1f}s"),
                    TimeElapsedColumn(), console=console, transient=True,
                    disable=not console.is_terminal)
    task = prog.add_task("run", total=total_requests, sim_t=0.0)

    def update(sim_t: float, arrived: int) -> None:
        prog.update(task, completed=arrived, sim_t=sim_t)

    return prog, update


def cmd_run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from specsim.simulator.report.output import Staging, check_destination, write_outputs

    console = _err_console()

    if args.out:  # a place we may not write is refused before any simulating (or importing)
        check_destination(Path(args.out), args.force)
    from specsim.simulator.cluster.engine import in_file, load_scenario, run_scenario, trace_for
    source = args.scenario
    sc, base, origin = load_scenario(source, args.set, args.seed)
    show = sc.simulation.progress and not args.quiet
    # the iteration log streams into the hidden staging folder as the run goes; it moves
    # into --out with everything else only when complete (a killed run leaves nothing there)
    staging = Staging(Path(args.out), args.force) if args.out else None
    stream = staging.tmp if staging is not None else None
    try:
        if show:
            from specsim.cost_models.catalog import get_model

            with in_file(origin):
                trace = trace_for(sc, base, get_model(sc.model, "model").max_context)
            prog, update = _progress_bar(len(trace))
            with prog:
                result = run_scenario(source, seed=args.seed, overrides=args.set, trace=trace,
                                      progress=update, stream_to=stream)
        else:
            trace = None
            result = run_scenario(source, seed=args.seed, overrides=args.set, stream_to=stream)
        if getattr(args, "baseline", False):
            result = _with_baseline(result, source, args, trace)
    except OSError as exc:  # the iteration log streamed into staging: a full disk, say
        if staging is None:
            raise
        staging.discard()
        from specsim.outputs import write_failed

        raise write_failed("--out", args.out, exc) from None
    except BaseException:
        if staging is not None:
            staging.discard()
        raise
    mode = None
    if args.out:
        from specsim.simulator.report.plots_later import can_fork

        plots = (False if args.no_plots else "later"
                 if _plots_later and not args.wait_plots and can_fork() else True)
        mode = write_outputs(result, Path(args.out), report=not args.no_report, force=args.force,
                             staging=staging, plots=plots)
    Console().print(summary_table(result.metrics))
    for note in result.notes:
        console.print(f"note: {note}")
    if args.out:
        how = " (replaced the previous specsim output there)" if mode == "replace" else ""
        log = "iterations." + sc.simulation.iteration_log
        later = not args.no_report and plots == "later"
        console.print(f"wrote {args.out}/metrics.json, requests.csv, {log}"
                      + ("" if args.no_report else ", report.md") + how
                      + ("; its plots are being drawn by a second process (in place within "
                         "seconds; --wait-plots waits for them)" if later else ""))
    global _finished_run
    _finished_run = True
    return 0


def _with_baseline(result, source, args, trace):
    """The same scenario with speculation off (same trace and seed), compared per class."""
    import dataclasses

    from rich.console import Console

    from specsim.simulator.cluster.engine import run_scenario
    from specsim.simulator.metrics.baseline import compare
    from specsim.simulator.metrics.run_metrics import Baseline

    base = run_scenario(source, seed=args.seed, overrides=[*args.set, "speculation.method=none"],
                        trace=trace)
    section = compare(result.metrics, result.requests, base.metrics, base.requests)
    console = Console()
    for cls, row in Baseline.model_validate(section).per_class.items():
        sp = row.tpot_speedup
        console.print(f"baseline (speculation off), {cls}: TPOT "
                      + (f"{row.baseline.tpot_s * 1e3:.2f} ms -> "
                         f"{row.speculative.tpot_s * 1e3:.2f} ms ({sp:.2f}x)"
                         if sp is not None else "n/a"))
    return dataclasses.replace(result, metrics={**result.metrics, "baseline": section})


def cmd_report(args: argparse.Namespace) -> int:
    from specsim.errors import ScenarioError
    from specsim.simulator.report.rerender import detect, rerender

    if args.seed_tables is not None:
        from specsim.simulator.report.seed_tables import seed_tables

        if args.folder is not None:
            raise ScenarioError("specsim report: give either FOLDER or --seed-tables "
                                "BASELINE_DIR SPEC_DIR [...], not both")
        print(seed_tables(args.seed_tables, args.out, args.force), end="")
        if args.out:
            print(f"wrote {args.out}/seed_tables.md, seed_cost.csv, seed_energy.csv")
        return 0
    if args.folder is None or args.out is not None:
        raise ScenarioError("specsim report: expected a FOLDER (or --seed-tables BASELINE_DIR "
                            "SPEC_DIR [...]; --out goes with --seed-tables)")
    kind = detect(args.folder)
    written = rerender(args.folder)
    print(f"{kind}: wrote {args.folder}/" + ", ".join(written))
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from rich.console import Console

    from specsim.outputs import check_folder
    from specsim.simulator.validation.replay import load_measured, replay, tables, write_replay

    console = _err_console()
    if args.out:  # a place we may not write is refused before any simulating
        check_folder(Path(args.out), args.force)
    if args.tp is not None and args.tp < 1:
        from specsim.errors import ScenarioError

        raise ScenarioError(f"--tp: expected an integer at least 1, got {args.tp}")
    run = load_measured(args.measured)
    n = min(len(run.requests), args.limit) if args.limit else len(run.requests)
    kwargs = dict(model=args.model, hardware=args.hardware, tp=args.tp, limit=args.limit,
                  record_iterations=bool(args.out) and not args.no_report)
    if args.quiet:
        rep = replay(run, args.scenario, **kwargs)
    else:
        prog, update = _progress_bar(n)
        with prog:
            rep = replay(run, args.scenario, progress=update, **kwargs)
    out = Console()
    m = rep.result.metrics
    engine = rep.scenario.get("scheduler", {})
    out.print(f"replay of {rep.run.name} ({rep.run.fmt}): {m['model']} on {m['fleet']['devices']}x "
              f"{m['fleet']['accelerator']} (TP{m['fleet']['tensor_parallel']}), "
              f"max_num_seqs {engine.get('max_batch')}, max_num_batched_tokens "
              f"{engine.get('token_budget')}, chunked prefill "
              f"{'on' if engine.get('chunked_prefill') else 'off'}, block {engine.get('block_size')}, "
              f"{m['kv_blocks_per_worker']:,} KV blocks; speculation off; cost model: "
              f"{m['calibration']}")
    for tab in tables(rep):
        out.print(tab)
    for note in dict.fromkeys([*rep.notes, *rep.result.notes]):
        console.print(f"note: {note}")
    if args.out:
        mode = write_replay(rep, Path(args.out), force=args.force, report=not args.no_report)
        how = " (replaced the previous specsim output there)" if mode == "replace" else ""
        log = "iterations." + (rep.result.scenario.get("simulation") or {}).get(
            "iteration_log", "parquet")
        console.print(f"wrote {args.out}/replay.csv, replay.json, replay.png, metrics.json, "
                      f"requests.csv, {log}" + ("" if args.no_report else ", report.md") + how)
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from specsim import limits
    from specsim.simulator.cluster.build import deploy
    from specsim.simulator.cluster.engine import (
        in_file,
        load_scenario,
        trace_for,
        workload_key,
    )

    sc, base, origin = load_scenario(args.scenario, args.set, None)
    with in_file(origin):  # every cross-key rule, the catalogs and the workload; no simulation
        deployment = deploy(sc, base)  # every pool
        trace = trace_for(sc, base, deployment.model.max_context)
        limits.check_requests(len(trace), workload_key(sc),
                              record_iterations=sc.simulation.record_iterations)
    print(f"{origin}: ok ({len(trace)} requests, model {sc.model if isinstance(sc.model, str) else 'inline'})")
    for note in deployment.notes:
        print(f"  note: {note}")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    import json

    from specsim.simulator.cluster import build  # noqa: F401  (registers the built-in policies)
    from specsim.simulator.scenario.schema import json_schema

    if getattr(args, "catalog", False):
        from specsim.cost_models.catalog_schema import catalog_json_schema as json_schema
    text = json.dumps(json_schema(), indent=2) + "\n"
    if args.out is not None:
        from specsim.outputs import write_file

        write_file(args.out, text, args.force, "--out")
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def cmd_acceptance_import(args: argparse.Namespace) -> int:
    from specsim.simulator.speculation.acceptance_import import import_profile

    res = import_profile(args.source, args.file, args.out, name=args.name, method=args.method,
                         cls=args.cls, drafter=args.drafter, k=args.k, form=args.form,
                         force=args.force)
    for cls, spec in res["entry"]["classes"].items():
        form = next(f for f in ("alpha_by_position", "histogram", "tau") if f in spec)
        print(f"{res['name']}.{cls}: {form} at k={spec['at_k']} ({spec.get('notes', '')})")
    print(f"wrote {res['path']}: use it as speculation: {{acceptance: {{profile: "
          f"{res['path']}}}}}")
    return 0


def cmd_acceptance_posterior(args: argparse.Namespace) -> int:
    """`specsim acceptance posterior`: counts -> a posterior per key (and an A/B size)."""
    import json

    from specsim.errors import ScenarioError
    from specsim.simulator.speculation import evidence

    if args.ab and (args.rate is None or args.step_cost is None
                    or (args.tpot_cv is None) == (args.requests is None)):
        raise ScenarioError("--ab: needs --rate, --step-cost and one of --tpot-cv or "
                            "--requests")
    if not args.ab:
        for flag in ("rate", "step_cost", "tpot_cv", "requests"):
            if getattr(args, flag) is not None:
                raise ScenarioError(f"--{flag.replace('_', '-')}: only with --ab")
    if args.out is not None:
        from specsim.outputs import check_file

        check_file(args.out, args.force, "--out")  # refuse before reading anything
        check_file(evidence.sidecar_path(args.out), args.force, "--out (its sidecar)")
    beliefs = evidence.posteriors(args.file, args.format, cls=args.cls,
                                  temperature=args.temperature,
                                  design_effect=args.design_effect)
    out: dict = {"posteriors": [b.to_dict(args.k, args.seed, args.draws) for b in beliefs]}
    lines = [ln for b in beliefs for ln in evidence.describe(b, args.k, args.seed, args.draws)]
    if args.ab:
        from specsim.simulator.planning import ab_sizing

        classes = [b.key.cls for b in beliefs]
        if len(set(classes)) != len(classes):
            raise ScenarioError("--ab: several keys share a class (models, drafters or "
                                "temperatures): keep one with --class or split the file")
        step = ab_sizing.parse_per_class(args.step_cost, "--step-cost")
        steps = ab_sizing.per_class(step, classes, "--step-cost")
        gains = {b.key.cls: ab_sizing.gain_from_tau(
            b.tau_draws(args.k or b.k, args.draws, args.seed), steps[b.key.cls])
            for b in beliefs}
        cv = (ab_sizing.tpot_cv_from_requests(args.requests) if args.requests is not None
              else ab_sizing.parse_per_class(args.tpot_cv, "--tpot-cv"))
        plan = ab_sizing.size_ab(
            gains, ab_sizing.parse_per_class(args.rate, "--rate"), cv,
            gain_cv={b.key.cls: b.request_tpot_cv(args.k or b.k, seed=args.seed)
                     for b in beliefs},
            confidence=args.confidence, power=args.power)
        out["ab"] = plan.to_dict()
        lines += ["", plan.table()]
    if args.out is not None:
        res = evidence.write_profile(beliefs, args.out, name=args.name, method=args.method,
                                     k=args.k, force=args.force, seed=args.seed,
                                     draws=args.draws, command=f" {Path(args.file).name} "
                                     f"--format {args.format}")
        out["wrote"] = {"profile": res["path"], "sidecar": res["sidecar"]}
        lines.append(f"wrote {res['path']} (posterior means; use it as speculation: "
                     f"{{acceptance: {{profile: {res['path']}}}}}) and {res['sidecar']} "
                     "(the posterior)")
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print("\n".join(lines))
    return 0


def _add_acceptance_commands(sub) -> None:
    """``specsim acceptance import``: measured acceptance -> a profile YAML (imports lazily)."""
    from specsim import flags

    acc = sub.add_parser("acceptance", help="acceptance profiles: import measured acceptance, "
                         "or hold it as a posterior")
    accsub = acc.add_subparsers(dest="acceptance_command", required=True)
    imp = accsub.add_parser(
        "import", help="turn measured acceptance into a profile YAML a scenario can name",
        description="Read measured acceptance and write an acceptance profile (per-position\n"
                    "conditional alphas, an accepted-length histogram, or tau at k) that a\n"
                    "scenario uses as speculation: {acceptance: {profile: FILE.yaml}}.\n"
                    "prometheus: vLLM /metrics text (vllm:spec_decode_num_drafts_total,\n"
                    "  ..._draft_tokens_total, ..._accepted_tokens_total,\n"
                    "  ..._accepted_tokens_per_pos_total{position=\"i\"});\n"
                    "csv: position,accepted,drafted | position,rate | position,alpha;\n"
                    "specdec: specsim's torch speculative loop (a calibration profile's\n"
                    "  end_to_end.runs, or a list of RunResult.summary() records).",
        epilog="example: specsim acceptance import --from prometheus metrics.txt "
               "--out profiles/eagle3-chat.yaml --method eagle3 --class chat",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    imp.add_argument("file", help="the measurements: Prometheus text, CSV, or specdec YAML/JSON")
    imp.add_argument("--from", dest="source", required=True,
                     choices=("prometheus", "csv", "specdec"), help="what FILE is")
    imp.add_argument("--out", required=True, help="profile YAML to write (not over an existing "
                     "file unless --force)")
    imp.add_argument("--name", help="profile name (default: the --out file's stem)")
    imp.add_argument("--method", help="the method measured (eagle3, mtp, ngram, ...)")
    imp.add_argument("--class", dest="cls", metavar="C", help="workload class of the figures "
                     "(default: 'default'; specdec: keep only this prompt kind)")
    imp.add_argument("--drafter", help="specdec: which drafter's runs (e.g. prompt-lookup)")
    imp.add_argument("--k", type=flags.positive_int, help="prometheus without per-position "
                     "counters: the configured draft length")
    imp.add_argument("--form", choices=("positions", "tau"), default="positions",
                     help="write per-position alphas (default) or tau at k")
    imp.add_argument("--force", action="store_true", help="replace an existing --out file")
    imp.set_defaults(func=cmd_acceptance_import)
    post = accsub.add_parser(
        "posterior", help="per-request, per-round acceptance -> a posterior with bands "
        "(and an A/B size)",
        description="Read measured acceptance per round (csv: request_id, class, turn, round,\n"
                    "accepted, a0..aD-1; sglang: per-request spec_accept_histogram; prometheus:\n"
                    "vLLM per-position counters) or a profile (bundled name or YAML path), and\n"
                    "print per class: counts, posterior-mean tau at k with P10-P90, the\n"
                    "spread across requests and the effective sample size. Prior Beta(1, 1)\n"
                    "per conditional alpha; rounds of one request are correlated (Beta over\n"
                    "requests, fitted by marginal likelihood). --out writes the posterior\n"
                    "mean as a profile plus FILE.posterior.yaml. --ab sizes an A/B per class.",
        epilog="example: specsim acceptance posterior tests/data/acceptance_rounds.csv "
               "--format csv --ab --rate code=0.5,chat=2 --tpot-cv 0.3 --step-cost 1.5",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    post.add_argument("file", help="the measurements (or, with --format profile, a bundled "
                      "profile's name or a profile YAML)")
    post.add_argument("--format", required=True,
                      choices=("csv", "prometheus", "sglang", "profile"), help="what FILE is")
    post.add_argument("--class", dest="cls", metavar="C", help="keep only class C (prometheus:"
                      " the class the counters are of)")
    post.add_argument("--k", type=flags.integer(1, 64, what="a draft length"),
                      help="draft length to report tau at (default: the measured one)")
    post.add_argument("--temperature", type=flags.number(0.0, 10.0, what="a temperature"),
                      help="sampling temperature of the measured traffic where FILE does not "
                      "say (default 0)")
    post.add_argument("--design-effect", type=flags.number(1.0, 1e6, what="a design effect"),
                      help="variance inflation from correlated rounds to use instead of the "
                      "fitted one (aggregate counters: default 1, independent rounds)")
    post.add_argument("--draws", type=flags.integer(100, 1_000_000, what="a number of draws"),
                      default=4000, help="posterior draws for the bands (default 4000)")
    post.add_argument("--seed", type=flags.seed, default=0, help="seed of the draws")
    post.add_argument("--out", help="write the posterior-mean profile YAML here (and "
                      "FILE.posterior.yaml beside it); not over existing files without --force")
    post.add_argument("--name", help="profile name (default: the --out file's stem)")
    post.add_argument("--method", help="the method measured (eagle3, mtp, ngram, ...)")
    post.add_argument("--force", action="store_true", help="replace existing --out files")
    post.add_argument("--json", action="store_true", help="print JSON instead of text")
    post.add_argument("--ab", action="store_true", help="also size an A/B per class: "
                      "speculation against none, on mean TPOT per request")
    post.add_argument("--rate", metavar="R|C=R,...", help="--ab: arrival rate per class, "
                      "requests/s")
    post.add_argument("--tpot-cv", metavar="CV|C=CV,...", help="--ab: TPOT coefficient of "
                      "variation across a class's requests without speculation")
    post.add_argument("--requests", metavar="requests.csv", help="--ab: take the TPOT CV per "
                      "class from a run's requests.csv instead")
    post.add_argument("--step-cost", metavar="X|C=X,...", help="--ab: a speculative step's "
                      "time over a plain decode step's at the load in question (from a run "
                      "with --baseline: its tau / its TPOT speedup)")
    post.add_argument("--confidence", type=flags.number(0.5, 0.999999, what="a confidence"),
                      default=0.95, help="--ab: two-sided confidence (default 0.95)")
    post.add_argument("--power", type=flags.number(0.5, 0.999999, what="a power"),
                      default=0.8, help="--ab: power (default 0.8)")
    post.set_defaults(func=cmd_acceptance_posterior)


class _VersionAction(argparse.Action):
    """``--version``, looked up only when asked (``outputs.version``): the parser of every
    other command loads nothing for it (it once read the installed distribution's metadata,
    25-65 ms a command; issue 22)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, **kw):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show program's version number and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        from specsim.outputs import version

        print(f"specsim {version()}")
        parser.exit()


def _simulate_runs(*args, **kwargs):
    """The calibration's replay through the simulator (imported only when calibrating)."""
    from specsim.simulator.calibration_replay import simulate_runs

    return simulate_runs(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    from specsim import flags  # numeric flags checked as they are read; errors on one line

    p = flags.OneLineParser(
        prog="specsim",
        description="Simulate LLM serving with speculative decoding: latency, throughput, "
                    "cost and energy.",
        epilog="example: specsim run scenarios/chat.yaml --out runs/chat\n"
               "bundled scenarios: the scenarios/ folder of the repository (chat.yaml, "
               "code_completion.yaml, their *_nospec twins, azure_conv_70b.yaml)",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action=_VersionAction)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="simulate a scenario and report")
    r.add_argument("scenario", help="scenario YAML file (e.g. scenarios/chat.yaml)")
    r.add_argument("--out", help="folder for metrics.json, requests.csv, iterations.parquet "
                   "(or .csv), report.md: new or empty (a previous specsim output only with --force)")
    r.add_argument("--force", action="store_true",
                   help="replace a previous specsim output in --out (never other files)")
    r.add_argument("--seed", type=flags.seed, help="override the scenario's seed")
    r.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a scenario key (repeatable), validated like the file")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.add_argument("--no-report", action="store_true", help="skip report.md and plots")
    r.add_argument("--wait-plots", action="store_true",
                   help="draw the report's PNGs before returning (the console script otherwise "
                   "leaves them to a second process once every other output is in place: "
                   "0.5-0.9 s sooner)")
    r.add_argument("--no-plots", action="store_true",
                   help="report.md with its tables but no PNGs (no matplotlib: about 0.8 s faster; "
                   "`specsim report DIR` draws them later)")
    r.add_argument("--baseline", action="store_true",
                   help="also run with speculation off (same trace and seed) and add the "
                        "per-class speedups to metrics.json (baseline)")
    r.set_defaults(func=cmd_run)
    v = sub.add_parser("validate", help="check a scenario without running it")
    v.add_argument("scenario", help="scenario YAML file (e.g. scenarios/chat.yaml)")
    v.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a scenario key (repeatable), validated like the file")
    v.set_defaults(func=cmd_validate)
    rp = sub.add_parser(
        "replay", help="replay a measured serving run and compare predicted with measured",
        description="Replay a measured run's exact arrivals and token counts through the\n"
                    "simulator with its engine settings (speculation off; the hardware's\n"
                    "default calibration unless --scenario names one) and print predicted vs\n"
                    "measured TTFT, TPOT, E2E and throughput per load stage and for the whole\n"
                    "run. Measured TPOT is (e2e_s - ttft_s) / (output_tokens - 1) per request\n"
                    "from the ground truth (inference-perf's own TPOT/ITL count two stream\n"
                    "events per token and are about half of it).",
        epilog="inputs: a vllm_runs <run>.json.gz (with <run>_ground_truth.json.gz and, for\n"
               "the stages, measured.csv next to it), or a CSV with columns arrival_s,\n"
               "input_tokens, output_tokens, ttft_s, e2e_s and optionally stage, request_id,\n"
               "has_error (engine settings from --scenario or the flags)\n"
               "example: specsim replay ../shared/data/vllm_runs/"
               "20260217-155451-llama-2-7b-tp1-codegen.json.gz --out runs/replay-7b",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    rp.add_argument("measured", help="the measured run: <run>.json.gz (vllm_runs) or a .csv")
    rp.add_argument("--out", help="folder for replay.csv, replay.json, replay.png and the run's "
                    "metrics.json, requests.csv, iterations.parquet (or .csv), report.md: "
                    "new or empty")
    rp.add_argument("--force", action="store_true",
                    help="replace a previous specsim output in --out (never other files)")
    rp.add_argument("--scenario", metavar="BASE.yaml",
                    help="scenario keys to replay with (engine:, scheduler:, calibration:, "
                         "model:, hardware:, ...; its workload is ignored)")
    rp.add_argument("--model", help="catalog model (default: the run's)")
    rp.add_argument("--hardware", help="catalog accelerator (default: the run's GPU)")
    rp.add_argument("--tp", type=flags.positive_int,
                    help="tensor parallelism (default: the run's)")
    rp.add_argument("--limit", type=flags.positive_int, metavar="N",
                    help="replay only the first N requests")
    rp.add_argument("--quiet", action="store_true", help="no progress bar")
    rp.add_argument("--no-report", action="store_true", help="skip report.md and its plots")
    rp.set_defaults(func=cmd_replay)
    rep = sub.add_parser("report", help="write report.md / report.html again from a run's, "
                         "a --baseline run's or a sweep's outputs (e.g. after --no-report)")
    rep.add_argument("folder", nargs="?", help="the --out folder of `specsim run` (with or "
                     "without --baseline) or of `specsim sweep`")
    rep.add_argument("--seed-tables", nargs="+", metavar="DIR",
                     help="BASELINE_DIR SPEC_DIR [SPEC_DIR ...]: run folders of one scenario, "
                     "without speculation then with (or one `specsim run --baseline` "
                     "folder): print the cost and energy tables per configuration (Markdown)")
    rep.add_argument("--out", metavar="DIR", help="with --seed-tables: also write "
                     "seed_tables.md, seed_cost.csv and seed_energy.csv into DIR")
    rep.add_argument("--force", action="store_true", help="replace a previous --out folder")
    rep.set_defaults(func=cmd_report)
    sch = sub.add_parser("schema", help="print the scenario's JSON Schema (for editors)")
    sch.add_argument("--catalog", action="store_true", help="the catalog entries' schema instead")
    sch.add_argument("--out", metavar="FILE", help="write the schema to FILE instead of "
                     "standard output (not over an existing file unless --force)")
    sch.add_argument("--force", action="store_true", help="replace an existing --out file")
    sch.set_defaults(func=cmd_schema)
    from specsim.cost_models.calibrate.cli import add_calibrate_command
    from specsim.traces.cli import add_trace_commands

    add_trace_commands(sub)
    _add_acceptance_commands(sub)
    from specsim.simulator.planning.plan_cli import add_plan_command

    add_plan_command(sub)
    from specsim.simulator.planning.sensitivity_cli import add_sensitivity_command

    add_sensitivity_command(sub)
    from specsim.simulator.planning.advise_cli import add_advise_command

    add_advise_command(sub)
    from specsim.simulator.planning.sweep import add_sweep_command  # light: runs import lazily

    add_sweep_command(sub)
    add_calibrate_command(sub, simulate_runs=_simulate_runs)  # imports torch only when run
    return p


def user_errors() -> tuple[type[Exception], ...]:
    """The errors that are the user's input, printed as one line (exit 2)."""
    from specsim.cost_models.errors import CatalogError
    from specsim.errors import ScenarioError
    from specsim.traces.errors import TraceError

    return ScenarioError, CatalogError, TraceError


#: the flags that name a place specsim writes (an empty one would silently write nothing)
_WRITE_FLAGS = ("out", "png")


def main(argv: list[str] | None = None) -> int:
    """Run one command. A user error is one line and exit 2; Ctrl-C and SIGTERM clean up
    (no staging folder stays) and exit 130 / 143; a closed standard output ends quietly."""
    from specsim.outputs import StdoutClosed, Terminated, guarded_process

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with guarded_process():
            for flag in _WRITE_FLAGS:
                if getattr(args, flag, None) == "":
                    from specsim.errors import ScenarioError

                    raise ScenarioError(f"--{flag}: expected a path, got an empty one")
            return int(args.func(args) or 0)
    except user_errors() as exc:
        print(f"specsim: error: {exc}", file=sys.stderr)
        return 2
    except StdoutClosed:  # `specsim schema | head`: the reader has what it wanted
        return 141
    except Terminated:
        print("specsim: terminated", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("specsim: interrupted", file=sys.stderr)
        return 130
    except SystemError as exc:  # the signal's exception raised inside numba-compiled code
        signalled = _signal_cause(exc, (Terminated, KeyboardInterrupt))
        if signalled is None:
            raise
        terminated = isinstance(signalled, Terminated)
        print(f"specsim: {'terminated' if terminated else 'interrupted'}", file=sys.stderr)
        return 143 if terminated else 130


def _signal_cause(exc: BaseException, kinds: tuple[type[BaseException], ...]
                  ) -> BaseException | None:
    """The ``kinds`` exception a SystemError wraps: a compiled kernel that calls back into
    Python when SIGTERM or Ctrl-C arrives returns "a result with an exception set", the
    signal's exception as its cause."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, kinds):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


#: set by a `specsim run` that reached its end: every output renamed into place, every
#: line printed (what lets the console script skip the interpreter's teardown)
_finished_run = False
#: the console script hands a run's report plots to a second process
#: (``report/plots_later.py``); ``main()`` called in-process (tests, the API) draws them
_plots_later = False


def entry() -> None:
    """The ``specsim`` console script: ``main()``, then, after a finished `run`, stdout and
    stderr flushed and the process ended with ``os._exit``. Tearing down the interpreter
    (freeing the trace, the request table, pandas, numba) costs 0.3-0.5 s that nobody
    waits for (issue 22); every output file is already closed and renamed into place, so
    nothing is lost. ``main()`` itself (tests, the API) always returns normally."""
    global _plots_later
    from specsim import gc_policy

    gc_policy.hold()  # released when the simulation loop starts (gc_policy's docstring)
    _plots_later = True
    code = main()
    if _finished_run:
        import os

        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BrokenPipeError:  # `specsim run ... | head`: the reader has what it wanted
            code = 141
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
