"""Issue 22's speed table: every case as a user runs it, measured against its target.

Each case is a whole ``specsim`` command in a fresh process (imports, simulation, every
output, the report unless the case says otherwise), timed from outside; peak RSS is that
process's own (``os.wait4``). "plots in place" is when the last report PNG appeared (the
console script leaves them to a second process once every other output is in place,
``report/plots_later.py``). "loop us/iter" is the simulation loop's wall time per
simulated iteration (an engine step). Then a profile summary of the hour-long trace's
simulation and the scaling of synthetic chat over request counts. A benchmark, not a test:
this machine is noisy, so run it twice and read the better figure.

    python benchmarks/speed_targets.py [--million] [--sweep N] [--only NAME ...] [--repeat N]
        [--against DIR]

``--against DIR`` runs every case also on another checkout of specsim (an older commit,
``git worktree add DIR <commit>``), interleaved with this one run by run, and adds its best
time and the ratio: issue 22 states its targets as ratios against the code of its day
(00851cb) measured in one run, which cancels this machine's load. The other checkout runs
with this environment's packages: DIR goes first on that process's path and the editable
install's finder is pointed at it (``AGAINST``; an editable install, ``pip install -e .``,
is needed).

Cases needing ``../shared/data`` (the hour-long Azure trace) are skipped without it;
``--million`` adds the 1,000,000-request row (minutes); ``--sweep N`` times a sweep of N
configurations of a 1,000-request chat scenario on 2 processes and scales it to issue 22's
10,000 (a target of 10 minutes).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
AZURE_HOUR = REPO.parent / "shared" / "data" / "traces" / "AzureLLMInferenceTrace_conv.csv"
SPECSIM = [sys.executable, "-m", "specsim.simulator.cli"]
#: the same command through ``main()`` with the interpreter's normal teardown, as before the
#: console script learned to end a finished run with ``os._exit`` (issue 22): ``--slow-exit``
SPECSIM_SLOW_EXIT = [sys.executable, "-c",
                     "import sys; from specsim.simulator.cli import main; sys.exit(main())"]
#: ``python -c AGAINST DIR REPO args...``: `specsim args...` as the checkout at DIR has it,
#: with this environment's packages (the editable install's finder pointed at DIR)
AGAINST = r"""
import os, runpy, sys
root, here = sys.argv[1], sys.argv[2]
del sys.argv[1:3]
# the other checkout's specsim/ first (its __init__ adds its tree's folders to its path)
sys.path[:] = [root] + [p for p in sys.path if p not in ("", os.getcwd(), here)]
finders = [m for n, m in list(sys.modules.items())
           if n.startswith("__editable__") and hasattr(m, "MAPPING")]
if not finders:
    sys.exit("--against needs specsim installed editable (pip install -e .)")
for m in finders:
    m.MAPPING = {k: v.replace(here, root, 1) for k, v in m.MAPPING.items()}
    m.NAMESPACES = {k: [p.replace(here, root, 1) for p in v]
                    for k, v in getattr(m, "NAMESPACES", {}).items()}
runpy.run_module("specsim.simulator.cli", run_name="__main__", alter_sys=True)
"""


def against(root: Path) -> list[str]:
    """The command that runs `specsim` from the checkout at ``root`` (``AGAINST``)."""
    return [sys.executable, "-c", AGAINST, str(root.resolve()), str(REPO)]


def _chat(requests: int, spec: bool = True) -> dict:
    s = yaml.safe_load((REPO / "scenarios" / "chat.yaml").read_text())
    s["workload"]["synthetic"]["requests"] = requests
    s["simulation"] = {"progress": False}
    if not spec:
        s["speculation"] = {"method": "none"}
    return s


def _replay_1k() -> dict:
    """The 1k Azure-conversation replay on CodeLlama-34B, 2x A100 TP2, prefill chunk 512
    (speculation off: no public acceptance figure for a CodeLlama-34B drafter here)."""
    return {"name": "replay-1k-codellama34b", "seed": 1,
            "hardware": {"accelerator": "A100-SXM-80GB", "count": 2, "tensor_parallel": 2},
            "model": "CodeLlama-34B", "speculation": {"method": "none"},
            "scheduler": {"max_batch": 256, "token_budget": 512, "chunked_prefill": True},
            "workload": {"trace": {"path": str(REPO / "scenarios" / "data"
                                                / "azure_conv_poisson_qps2_n1000.csv"),
                                   "format": "vidur"}, "class": "chat"},
            "simulation": {"progress": False}}


def _azure_hour(spec: bool) -> dict:
    """The one-hour Azure conversation trace on Llama-3.1-8B, 1x H100; a Llama-3.2-1B
    draft model at k=4 (acceptance: the SpecBench draft-model profile) or none."""
    s = {"name": "azure-hour-llama8b", "seed": 1,
         "hardware": {"accelerator": "H100-SXM", "count": 1, "tensor_parallel": 1},
         "model": "Llama-3.1-8B",
         "speculation": ({"method": "draft_model", "drafter": "Llama-3.2-1B", "k": 4,
                          "acceptance": {"profile": "vicuna-7b-specbench-draft-model"}}
                         if spec else {"method": "none"}),
         "scheduler": {"max_batch": 256, "token_budget": 8192, "chunked_prefill": True},
         "workload": {"trace": {"path": str(AZURE_HOUR), "format": "azure"}, "class": "chat"},
         "simulation": {"progress": False}}
    return s


@dataclass
class Case:
    name: str
    what: str
    target_s: float
    scenario: dict | None  # None: `specsim --help`
    target_mb: float | None = None
    needs: Path | None = None
    args: list[str] = field(default_factory=list)
    #: the arguments for ``--against``'s older code where they differ (None: ``args``)
    against_args: list[str] | None = None


def cases(million: bool) -> list[Case]:
    out = [
        Case("help", "`specsim --help`", 0.3, None),
        Case("replay1k", "1k replay, CodeLlama-34B, A100 TP2, chunk 512, all outputs", 1.0,
             _replay_1k()),
        Case("hour_spec", "1-hour Azure conv (19,366 req), Llama-3.1-8B, draft model k=4, "
             "all outputs", 1.5, _azure_hour(True), needs=AZURE_HOUR),
        Case("hour_off", "same, speculation off, all outputs", 1.5, _azure_hour(False),
             needs=AZURE_HOUR),
        Case("hour_spec_wait", "same as the k=4 row, `--wait-plots` (PNGs drawn before it "
             "returns)", 1.5, _azure_hour(True), needs=AZURE_HOUR, args=["--wait-plots"],
             against_args=[]),  # before issue 22 every run drew its PNGs before returning
        Case("replay1k_noplots", "same 1k replay, `--no-plots` (report.md tables, no PNGs)",
             1.0, _replay_1k(), args=["--no-plots"]),
        Case("hour_off_noplots", "1-hour trace, speculation off, `--no-plots`", 3.0,
             _azure_hour(False), needs=AZURE_HOUR, args=["--no-plots"]),
        Case("chat100k", "100,000 synthetic chat requests, EAGLE-3, all outputs but report",
             10.0, _chat(100_000), args=["--no-report"]),
    ]
    if million:
        out.append(Case("chat1m", "1,000,000 synthetic chat requests, iteration log on, "
                        "no report", 60.0, _chat(1_000_000), target_mb=700,
                        args=["--no-report"]))
    return out


def _run(cmd: list[str]) -> tuple[float, float, int]:
    """(wall s, peak RSS MB, exit code) of one process, measured from outside."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        sys.stderr.write(p.stderr.read().decode(errors="replace")[-2000:])
    p.stderr.close()
    return wall, usage.ru_maxrss / 1024, p.returncode


def measure(case: Case, tmp: Path, repeat: int, specsim: list[str] = SPECSIM,
            other: list[str] | None = None) -> tuple[dict, dict | None]:
    """The best of ``repeat`` runs of ``case`` with ``specsim``, and with ``other`` (another
    checkout: ``against``) run by run beside it, or None."""
    cmds = [specsim] + ([other] if other else [])
    if case.scenario is None:
        best = []
        for cmd in cmds:
            walls = [_run([*cmd, "--help"]) for _ in range(max(repeat, 3))]
            best.append({"wall_s": min(w for w, _, _ in walls),
                         "rss_mb": min(r for _, r, _ in walls)})
        return best[0], (best[1] if other else None)
    path = tmp / f"{case.name}.yaml"
    path.write_text(yaml.safe_dump(case.scenario, sort_keys=False))
    best: list[dict | None] = [None] * len(cmds)
    for _ in range(repeat):
        for i, cmd in enumerate(cmds):
            out = tmp / f"{case.name}-out{i}"
            args = case.args if i == 0 or case.against_args is None else case.against_args
            wall, rss, rc = _run([*cmd, "run", str(path), "--out", str(out), "--force",
                                  "--quiet", *args])
            if rc:
                best[i] = {"error": f"exit {rc}"}
                continue
            m = json.loads((out / "metrics.json").read_text())
            row = {"wall_s": wall, "rss_mb": rss, "loop_s": m.get("wall_time_s"),
                   "simulated_s": m.get("simulated_time_s"), "iterations": m.get("iterations"),
                   "plots_s": _plots_in_place(out, wall)}
            if best[i] is None or ("error" not in best[i] and wall < best[i]["wall_s"]):
                best[i] = row
    return best[0], (best[1] if other else None)


def _plots_in_place(out: Path, wall: float, timeout: float = 60.0) -> float | None:
    """Seconds from the command's start until its report's PNGs were all in place (None: a
    run without a report): a second process draws them after the command returns."""
    report = out / "report.md"
    if not report.is_file():
        return None
    t0 = time.perf_counter()
    from specsim.simulator.report.report import PLOTS_PENDING

    while PLOTS_PENDING in report.read_text():
        if time.perf_counter() - t0 > timeout:
            return float("nan")
        time.sleep(0.01)
    return wall + time.perf_counter() - t0


def sweep_time(n: int, jobs: int = 2) -> tuple[int, float]:
    """(configurations, wall s) of `specsim sweep` over ``n`` configurations of the
    1,000-request chat scenario (EAGLE-3 k x max_batch x arrival rate), ``jobs`` processes,
    tables and plots written."""
    ks = [1, 2, 3, 4, 5, 6, 7, 8]
    batches = [32, 64, 128, 256, 512]
    rates = [round(1.0 + 0.5 * i, 2) for i in range(max(1, -(-n // (len(ks) * len(batches)))))]
    with tempfile.TemporaryDirectory() as d:
        scen = Path(d) / "chat.yaml"
        scen.write_text(yaml.safe_dump(_chat(1_000), sort_keys=False))
        cmd = [*SPECSIM, "sweep", str(scen), "--jobs", str(jobs), "--out", str(Path(d) / "s"),
               "--set", "speculation.k=" + ",".join(map(str, ks)),
               "--set", "scheduler.max_batch=" + ",".join(map(str, batches)),
               "--set", "workload.synthetic.arrival.rate=" + ",".join(map(str, rates))]
        wall, _, rc = _run(cmd)
        if rc:
            return 0, float("nan")
    return len(ks) * len(batches) * len(rates), wall


def profile_summary(top: int = 8) -> str:
    """Where the hour-long trace's simulation spends its time (cProfile, in process)."""
    from specsim.simulator.cluster.engine import run_scenario

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "hour.yaml"
        scenario = _azure_hour(True) if AZURE_HOUR.is_file() else _chat(10_000)
        path.write_text(yaml.safe_dump(scenario, sort_keys=False))
        prof = cProfile.Profile()
        prof.enable()
        run_scenario(str(path))
        prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).strip_dirs().sort_stats("tottime").print_stats(top)
    lines = [ln for ln in s.getvalue().splitlines() if ln.strip()]
    keep = [ln for ln in lines if "function calls" in ln or "ncalls" in ln or "(" in ln]
    return "\n".join(keep[: top + 2])


def scaling(sizes: list[int]) -> list[tuple[int, float, float]]:
    """(requests, simulation loop s, us per request) of synthetic chat, in process."""
    from specsim.simulator.cluster.engine import run_scenario

    rows = []
    for n in sizes:
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "chat.yaml"
            s = _chat(n)
            s["simulation"]["record_iterations"] = True
            path.write_text(yaml.safe_dump(s, sort_keys=False))
            r = run_scenario(str(path))
        loop = r.metrics["wall_time_s"]
        rows.append((n, loop, 1e6 * loop / n))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--million", action="store_true", help="add the 1M-request row")
    ap.add_argument("--only", nargs="+", help="case names to run")
    ap.add_argument("--repeat", type=int, default=1, help="runs per case (the best is shown)")
    ap.add_argument("--sweep", type=int, default=0, metavar="N",
                    help="time a sweep of about N configurations (0: skip)")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--slow-exit", action="store_true",
                    help="run each command through main() with the interpreter's teardown "
                    "(the exit as it was before issue 22), for a before/after in one session")
    ap.add_argument("--scaling", type=int, nargs="*", default=[10_000, 100_000],
                    help="request counts for the scaling table (none: skip)")
    ap.add_argument("--against", type=Path, metavar="DIR",
                    help="also run every case on the checkout at DIR, interleaved, and "
                    "print its time and the ratio (issue 22: against 00851cb)")
    args = ap.parse_args()
    other = against(args.against) if args.against else None
    compiled = "numba installed" if _has("numba") else "numba not installed (pure kernel)"
    print(f"specsim speed targets ({compiled}; {os.cpu_count()} CPU cores)\n")
    extra = " against | ratio |" if other else ""
    print("| case | target | measured | plots in place | sim / real time | loop s "
          "| loop us/iter | peak RSS MB | met |" + extra)
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|" + ("---:|---:|" if other else ""))
    blank = "| | | | | | |" + (" | |" if other else "")
    with tempfile.TemporaryDirectory() as d:
        if other:  # the other checkout's kernel compiles on its first run: not timed
            warm = _replay_1k()
            (Path(d) / "warm.yaml").write_text(yaml.safe_dump(warm, sort_keys=False))
            _run([*other, "run", str(Path(d) / "warm.yaml"), "--out", str(Path(d) / "w"),
                  "--force", "--quiet", "--no-plots"])
        for case in cases(args.million):
            if args.only and case.name not in args.only:
                continue
            if case.needs is not None and not case.needs.is_file():
                print(f"| {case.what} | <= {case.target_s:g} s | skipped: {case.needs} "
                      f"absent {blank}")
                continue
            r, o = measure(case, Path(d), args.repeat,
                           SPECSIM_SLOW_EXIT if args.slow_exit else SPECSIM, other)
            if "error" in r:
                print(f"| {case.what} | <= {case.target_s:g} s | {r['error']} {blank}")
                continue
            ratio = (f"{r['simulated_s'] / r['wall_s']:,.0f}x" if r.get("simulated_s")
                     else "")
            met = r["wall_s"] <= case.target_s and (case.target_mb is None
                                                     or r["rss_mb"] <= case.target_mb)
            target = f"<= {case.target_s:g} s" + (f", <= {case.target_mb:g} MB"
                                                   if case.target_mb else "")
            loop = f"{r['loop_s']:.2f}" if r.get("loop_s") is not None else ""
            per = (f"{1e6 * r['loop_s'] / r['iterations']:.1f}"
                   if r.get("loop_s") and r.get("iterations") else "")
            plots = f"{r['plots_s']:.2f} s" if r.get("plots_s") is not None else ""
            vs = ""
            if other:
                vs = (f" {o['error']} | |" if "error" in o else
                      f" {o['wall_s']:.2f} s | {r['wall_s'] / o['wall_s']:.3f} |")
            print(f"| {case.what} | {target} | {r['wall_s']:.2f} s | {plots} | {ratio} | "
                  f"{loop} | {per} | {r['rss_mb']:.0f} | {'yes' if met else 'NO'} |{vs}",
                  flush=True)
    if args.sweep:
        n, wall = sweep_time(args.sweep)
        per = wall / n if n else float("nan")
        print(f"\nsweep of {n:,} configurations of a 1,000-request chat scenario, 2 processes: "
              f"{wall:.1f} s ({per:.3f} s each); 10,000 at that rate: {10_000 * per / 60:.1f} min "
              f"(target <= 10 min: {'met' if 10_000 * per <= 600 else 'NOT met'})")
    if args.scaling:
        print("\nscaling, synthetic chat (EAGLE-3), simulation loop in process:")
        print("| requests | loop s | us per request |")
        print("|---:|---:|---:|")
        for n, loop, per in scaling(args.scaling):
            print(f"| {n:,} | {loop:.2f} | {per:.1f} |", flush=True)
    if not args.no_profile:
        print("\nprofile (tottime) of the hour-long trace's simulation, draft model k=4:")
        print(profile_summary())
    return 0


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


if __name__ == "__main__":
    sys.exit(main())
