"""``specsim trace stats`` and ``specsim trace fit``: look at a trace, or fit a generator.

The main CLI calls ``add_trace_commands(subparsers)``; each command sets ``func(args) ->
int``. TraceError propagates so the main CLI prints ``specsim: error: <msg>``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specsim.traces.names import ARRIVAL_MODELS, FORMATS, LENGTH_MODELS

if TYPE_CHECKING:  # pragma: no cover
    from rich.table import Table


def add_trace_commands(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``trace stats`` and ``trace fit`` on an argparse subparsers object."""
    from specsim import flags  # numeric flags checked as they are read

    trace = subparsers.add_parser("trace", help="inspect request traces and fit generators to them")
    commands = trace.add_subparsers(dest="trace_command", metavar="{stats,fit}", required=True)

    stats = commands.add_parser(
        "stats", help="rate, burstiness, lengths and prefix reuse of a trace"
    )
    stats.add_argument("file", metavar="FILE", help="trace file (CSV or JSON lines, .gz ok)")
    stats.add_argument(
        "--format", default="auto", choices=FORMATS, help="trace format (default: detect)"
    )
    stats.add_argument(
        "--png", metavar="PATH", help="also write a plot of rate over time and lengths"
    )
    stats.add_argument(
        "--json", action="store_true", help="print the statistics as JSON instead of tables"
    )
    stats.add_argument(
        "--window", type=flags.positive_seconds, metavar="S",
        help="rate window in seconds (default: ~60 windows)"
    )
    stats.add_argument("--keep-failed", action="store_true", help="count failed requests too")
    stats.add_argument("--force", action="store_true", help="replace an existing --png file")
    stats.set_defaults(func=run_stats)

    fit = commands.add_parser(
        "fit", help="fit a synthetic generator (a workload: section) to a trace"
    )
    fit.add_argument("file", metavar="FILE", help="trace file (CSV or JSON lines, .gz ok)")
    fit.add_argument(
        "--format", default="auto", choices=FORMATS, help="trace format (default: detect)"
    )
    fit.add_argument(
        "--out", metavar="spec.yaml", help="write the workload section here (default: stdout)"
    )
    fit.add_argument(
        "--arrival",
        default="gamma",
        choices=ARRIVAL_MODELS,
        help="gamma: rate + CV; curve: the trace's rate per window (default: gamma)",
    )
    fit.add_argument(
        "--lengths",
        default="empirical",
        choices=LENGTH_MODELS,
        help="length model (default: empirical quantiles)",
    )
    fit.add_argument(
        "--window", type=flags.positive_seconds, metavar="S",
        help="window for --arrival curve, in seconds"
    )
    fit.add_argument(
        "--class",
        dest="workload_class",
        metavar="NAME",
        help="every request's workload class, e.g. chat (picks the acceptance profile's "
        "class; without it the output says to add one)",
    )
    fit.add_argument("--force", action="store_true", help="replace an existing --out file")
    fit.set_defaults(func=run_fit)
    return trace


def _length_table(stats: dict[str, Any]) -> Table:
    from rich.table import Table

    table = Table(title="lengths (tokens)")
    table.add_column("")
    for name in ("mean", "p50", "p90", "p99", "max"):
        table.add_column(name, justify="right")
    for column in ("prompt_tokens", "output_tokens"):
        row = stats[column]
        table.add_row(
            column.replace("_tokens", ""),
            *(f"{row[k]:,.0f}" for k in ("mean", "p50", "p90", "p99", "max")),
        )
    return table


def _summary_table(stats: dict[str, Any]) -> Table:
    from rich.table import Table

    table = Table(show_header=False)
    table.add_column("", style="bold")
    table.add_column("", justify="right")
    table.add_row("requests", f"{stats['requests']:,}")
    table.add_row("duration", f"{stats['duration_s']:,.1f} s")
    table.add_row("mean rate", f"{stats['mean_rate']:.3f} req/s")
    table.add_row(
        f"peak rate ({stats['rate_over_time']['window_s']:g} s windows)",
        f"{stats['peak_rate']:.3f} req/s",
    )
    table.add_row("inter-arrival CV", f"{stats['interarrival_cv']:.3f}")
    table.add_row("sessions", f"{stats['sessions']:,}")
    table.add_row("classes", ", ".join(f"{k} {v:,}" for k, v in stats["classes"].items()))
    table.add_row("prefix blocks", f"{stats['prefix_blocks']:,}")
    table.add_row("prefix reuse", f"{stats['prefix_reuse_fraction']:.1%}")
    return table


def run_stats(args: argparse.Namespace) -> int:
    """``trace stats``: tables (or JSON) and an optional PNG."""
    from rich.console import Console

    from specsim.outputs import check_file, write_file
    from specsim.traces.loaders import load_trace
    from specsim.traces.stats import trace_stats

    if args.png is not None:  # checked before reading the trace
        check_file(args.png, args.force, "--png")
    df = load_trace(args.file, args.format, keep_failed=args.keep_failed)
    stats = trace_stats(df, args.window)
    stats["file"] = str(args.file)
    stats["format"] = df.attrs.get("format")
    stats["failed_requests"] = df.attrs.get("failed_requests", 0)
    if args.png:
        from specsim.traces.plot import plot_trace

        write_file(args.png, lambda tmp: plot_trace(df, stats, tmp, title=Path(args.file).name),
                   args.force, "--png")
    if args.json:
        print(json.dumps(stats, indent=2))
        return 0
    console = Console()
    failed = (
        f", {stats['failed_requests']:,} failed requests dropped"
        if stats["failed_requests"] and not args.keep_failed
        else ""
    )
    console.print(f"[bold]{args.file}[/bold] ({stats['format']}{failed})", soft_wrap=True)
    console.print(_summary_table(stats))
    console.print(_length_table(stats))
    if args.png:
        console.print(f"plot written to {args.png}")
    return 0


def run_fit(args: argparse.Namespace) -> int:
    """``trace fit``: print or write the fitted ``workload:`` section."""
    from rich.console import Console

    from specsim.outputs import check_file, write_file
    from specsim.traces.fit import fit_synthetic, fitted_yaml
    from specsim.traces.loaders import load_trace

    if args.out is not None:  # checked before reading the trace
        check_file(args.out, args.force, "--out")
    df = load_trace(args.file, args.format)
    section = fit_synthetic(df, args.arrival, args.lengths, args.window, args.workload_class)
    text = fitted_yaml(section, args.file, len(df))
    if args.out:
        write_file(args.out, text, args.force, "--out")
        Console(stderr=True).print(f"fitted workload written to {args.out}")
    else:
        sys.stdout.write(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (``python -m specsim.traces.cli``), mirroring how specsim runs these."""
    from specsim.errors import ScenarioError
    from specsim.flags import OneLineParser  # a bad flag is one line, exit 2, as in specsim
    from specsim.traces.errors import TraceError

    parser = OneLineParser(prog="specsim")
    add_trace_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except (TraceError, ScenarioError) as exc:
        print(f"specsim: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
