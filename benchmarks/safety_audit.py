"""Issue 24's checklist, walked as a hostile user would: every case the issue names, run
through the CLI in a subprocess under the issue's bounds.

Each case runs ``specsim ...`` in a fresh process with its address space capped at 500 MB
(``RLIMIT_AS``) and a 10 s wall-clock limit, in a folder of its own; the table says, per
case, the exit status, the lines of stderr, the peak RSS (``wait4``), the files left
behind or changed, and PASS/FAIL. A refusal passes when it is exit 2 with one line and no
traceback, nothing appeared and no user file changed; a case that must work (escaping,
a cap's legitimate input) passes when its own check holds. A full disk is a 64 KiB tmpfs
mounted for the case (``os.fsync`` raising ENOSPC inside the child where none can be
mounted); as root, a read-only folder is a read-only tmpfs (root ignores mode bits).

Memory: a refusal runs under ``RLIMIT_AS`` 500 MB (it must refuse before loading the heavy
libraries); a case doing real work (a run, a sweep) under 2 GiB, since numba's LLVM, scipy
and the thread arenas map ~1.6 GB of address space for a 5-request sweep while ~250 MB is
resident. Every case must peak under 500 MB of RSS.

    python benchmarks/safety_audit.py            # every case, the table, exit 1 on a FAIL
    python benchmarks/safety_audit.py --only plan  # cases whose name contains "plan"

Not a test (tests/test_input_bombs.py, test_bounds.py, test_outputs.py and
test_report_inputs.py assert each case); this is the issue's list in one place.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import signal
import stat
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHAT = REPO / "scenarios" / "chat.yaml"
NOSPEC = REPO / "scenarios" / "chat_nospec.yaml"
TRACE = REPO / "scenarios" / "data" / "azure_conv_poisson_qps2_n1000.csv"
MEMORY = 500 * 1024**2  # the bound: address space for a refusal, peak RSS for all
#: address space for a case that does real work: a legitimate 5-request sweep maps ~1.6 GB
#: (numba's LLVM, scipy, thread arenas) while ~250 MB is resident (VmPeak / VmHWM)
HEAVY_MEMORY = 2 * 1024**3
LIMIT_S = 10.0  # the bound on time
SMALL = ["--set", "workload.synthetic.requests=20", "--quiet"]
PLAN = ["--slo", "tpot_p99=0.05", "--qps", "2", "--requests", "20", "--duration", "5",
        "--quiet"]

# the child: optionally a simulated full disk, then the CLI's main as `specsim` runs it
BOOT = r"""
import errno, os, sys
if sys.argv[1] == "enospc":
    def fsync(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    os.fsync = fsync
from specsim.simulator.cli import main
sys.exit(main(sys.argv[2:]))
"""


@dataclass
class Case:
    """One hostile input: what it runs, what must hold afterwards."""

    bullet: str  # the bullet it comes from
    name: str
    argv: list[str]  # after `specsim`; "{d}" is the case's own folder
    expect: int = 2
    env: dict[str, str] = field(default_factory=dict)
    check: Callable[[Path, str], str | None] | None = None  # (folder, stderr) -> why it fails
    leaves: bool = False  # True: outputs are expected (a case that must work)
    mode: str = "plain"  # "enospc": a simulated full disk
    stdout: str | None = None  # a path for standard output (e.g. /dev/full)
    sigterm_after: float | None = None  # send SIGTERM after this many seconds
    heavy: bool = False  # does real work: numba/LLVM and scipy map ~1.6 GB of address space
    permissions: bool = False  # needs file permissions enforced (not so for root)
    full_disk: bool = False  # "{full}" is a 64 KiB tmpfs (or, unmountable, a simulated ENOSPC)


@dataclass
class Outcome:
    rc: int | str
    lines: int
    rss_mb: float
    left: list[str]
    verdict: str
    why: str = ""
    first: str = ""
    err: str = ""


# ---------------------------------------------------------------------------- inputs
def _chain(depth: int = 9, width: int = 9) -> str:
    """A YAML alias bomb: a few hundred bytes expanding to width**depth leaves."""
    parts = [f"&a0 [{', '.join(['lol'] * width)}]"]
    parts += [f"&a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, depth)]
    return f"[{', '.join(parts)}]"


def _with(old: str, new: str, base: Path = CHAT) -> str:
    text = base.read_text()
    assert old in text, old
    return text.replace(old, new)


def _trace_scenario(trace: Path) -> str:
    text = CHAT.read_text()
    return (text[:text.index("workload:")] + f"workload:\n  trace: {{path: {trace}}}\n"
            + text[text.index("slo:"):])


def _setup(d: Path, name: str) -> None:
    """The case's input files, in its folder ``d`` (made here)."""
    d.mkdir(parents=True)
    bomb = _chain()
    desc = "description: Open-ended chat traffic, EAGLE-3 speculation, Qwen3-8B on 1x H100"
    files: dict[str, str | bytes] = {
        "bomb_name.yaml": _with("name: chat-eagle3", f"name: {bomb}"),
        "bomb_desc.yaml": _with(desc, f"description: {bomb}"),
        "bomb_rules.yaml": _with("  k: 4\n", f"  k: 4\n  policy_params: {{rules: {bomb}}}\n"),
        "acc_bomb.yaml": f"mine:\n  method: eagle3\n  source: measured\n  notes: {bomb}\n"
                         "  alpha: 0.7\n",
        "bomb_acc.yaml": _with("    profile: qwen3-8b-eagle3", f"    profile: {d}/acc_bomb"
                                                                ".yaml#mine"),
        "space_bomb.yaml": f"speculation.k: {bomb}\n",
        "space_bad.yaml": "speculation.k: [2, 4\n",
        "space_unknown.yaml": "speculation.kk: [2, 4]\n",
        "space_huge.yaml": "speculation.k: [" + ", ".join(str(i % 8 + 1) for i in range(5))
                           + "]\nworkload.synthetic.requests: ["
                           + ", ".join(str(i + 1) for i in range(10_000)) + "]\n"
                           "hardware.count: [" + ", ".join(str(i + 1) for i in range(100))
                           + "]\n",
        "dup_key.yaml": _with("seed: 7\n", "seed: 7\nseed: 8\n"),
        "dup_columns.csv": "arrival_s,prompt_tokens,output_tokens,prompt_tokens\n0.5,10,10,20\n",
        "far.csv": "arrival_s,prompt_tokens,output_tokens\n0,10,10\n1e300,10,10\n",
        "acc.csv": "position,rate\n0,0.8\n1,0.6\n",
        "plan.csv": "my own plan\n",
        "user.txt": "the user's file\n",
    }
    files["gz_trace.yaml"] = _trace_scenario(d / "bomb.csv.gz")
    for fname, content in files.items():
        path = d / fname
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    if "gzip" in name:
        with gzip.open(d / "bomb.csv.gz", "wb", compresslevel=9) as fh:
            fh.write(b"arrival_s,prompt_tokens,output_tokens\n")
            block = b"0.5,10,10\n" * 100_000
            for _ in range(50):  # 50 MB inflated from ~100 KB
                fh.write(block)
    if "huge_line" in name:
        with open(d / "huge_line.csv", "wb") as fh:
            fh.write(b"arrival_s,prompt_tokens,output_tokens\n0.5,10,1")
            for _ in range(30):
                fh.write(b"0" * 1024**2)
    if "under_cap" in name:
        (d / "long_line.csv").write_text("arrival_s,prompt_tokens,output_tokens,note\n0.5,10,10,"
                                         + "n" * (4 * 1024**2 - 100) + "\n1.0,10,10,x\n")
    if "header" in name:
        (d / "huge_header.csv").write_bytes(b",".join([b"arrival_s"] * 300_000) + b"\n0.5\n")
    (d / "ro").mkdir()
    (d / "ro").chmod(stat.S_IRUSR | stat.S_IXUSR)
    (d / "measure.csv").write_text("not used\n")
    (d / "plan_dir").mkdir()
    (d / "plan_dir" / "plan.csv").write_text("my own plan\n")
    (d / "sweep_dir").mkdir()
    os.symlink(d / "user.txt", d / "link.yaml")
    if name.startswith("calibrate_out") or name.startswith("report"):
        _slow_inputs(d, name)


def _slow_inputs(d: Path, name: str) -> None:
    """Inputs that take a run to make: only for the cases that use them."""
    sys.path.insert(0, str(REPO))
    if name.startswith("calibrate"):
        from tests.test_calibration_fit import _write_csv

        _write_csv(d / "steps.csv")
        return
    import contextlib
    import io

    from specsim.simulator.cli import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        if "sweep" in name:
            from specsim.simulator.planning.sweep import run_sweep

            run_sweep(str(CHAT), {"workload.synthetic.requests": [5]}, out=d / "sweep",
                      plots=False)
        else:
            main(["run", str(NOSPEC), "--out", str(d / "run"), *SMALL,
                  "--set", "simulation.iteration_log=csv"])


# ---------------------------------------------------------------------------- checks
def _line_has(*words: str) -> Callable[[Path, str], str | None]:
    def check(d: Path, err: str) -> str | None:
        missing = [w for w in words if w not in err]
        return f"stderr lacks {missing}" if missing else None
    return check


def _csv_escaped(rel: str, column: str) -> Callable[[Path, str], str | None]:
    def check(d: Path, err: str) -> str | None:
        import pandas as pd

        values = set(pd.read_csv(d / rel)[column].astype(str))
        bad = [v for v in values if v[:1] in "=+-@"]
        return f"{rel} {column} holds {bad}" if bad else None
    return check


def _md_escaped(d: Path, err: str) -> str | None:
    md = (d / "out" / "report.md").read_text()
    return "raw <script> in report.md" if "<script>" in md else None


def _terminated(d: Path, err: str) -> str | None:
    left = [p.name for p in d.iterdir() if "specsim-tmp" in p.name]
    if err.strip() != "specsim: terminated":
        return f"stderr {err.strip()[:80]!r}"
    return f"staging left: {left}" if left else None


def _emptied_metrics(d: Path) -> None:
    (d / "run" / "metrics.json").write_text("{}")


def _users_report(d: Path) -> None:
    marker = d / "sweep" / ".specsim-sweep"
    info = json.loads(marker.read_text())
    (d / "sweep" / "report.md").write_text("my notes\n")
    info["files"] = [f for f in info["files"] if f != "report.md"]
    marker.write_text(json.dumps(info))


def _huge_requests(d: Path) -> None:
    with open(d / "run" / "requests.csv", "wb") as fh:
        for _ in range(64):
            fh.write(b"x" * 1024**2)


def _bomb_metrics(d: Path) -> None:
    (d / "run" / "metrics.json").write_bytes(b"[" * (40 * 1024**2))


#: the case name's changes to its folder after _setup (report cases break a good folder)
PREPARE: dict[str, Callable[[Path], None]] = {
    "report_emptied_metrics": _emptied_metrics,
    "report_sweep_users_report_md": _users_report,
    "report_huge_line_requests_csv": _huge_requests,
    "report_json_bomb_metrics": _bomb_metrics,
}


def cases() -> list[Case]:
    """Every bullet of issue 24, as cases; ``{d}`` is the case's folder."""
    d = "{d}"
    out = f"{d}/out"
    bomb = _chain()
    c = [
        # 1. user files overwritten
        Case("user files", "calibrate_out_existing_file",
             ["calibrate", "--from-measurements", f"{d}/steps.csv", "--out", f"{d}/user.txt"]),
        Case("user files", "calibrate_out_symlink",
             ["calibrate", "--from-measurements", f"{d}/steps.csv", "--out", f"{d}/link.yaml"]),
        Case("user files", "plan_out_users_plan_csv",
             ["plan", str(CHAT), *PLAN, "--out", f"{d}/plan_dir"]),
        Case("user files", "plan_out_unwritable", ["plan", str(CHAT), *PLAN, "--out",
                                                   f"{d}/ro/x"], permissions=True),
        # 2. YAML alias bombs
        Case("alias bombs", "run_alias_name", ["run", f"{d}/bomb_name.yaml", "--out", out]),
        Case("alias bombs", "validate_alias_description", ["validate", f"{d}/bomb_desc.yaml"]),
        Case("alias bombs", "validate_alias_acceptance_notes",
             ["validate", f"{d}/bomb_acc.yaml"]),
        Case("alias bombs", "run_alias_policy_rules",
             ["run", f"{d}/bomb_rules.yaml", "--out", out]),
        Case("alias bombs", "run_alias_set", ["run", str(CHAT), "--set",
                                              f"description={bomb}", "--out", out]),
        Case("alias bombs", "sweep_alias_set", ["sweep", str(CHAT), "--set",
                                                f"description={bomb}", "--out", out]),
        Case("alias bombs", "plan_alias_space",
             ["plan", str(CHAT), *PLAN, "--space", f"{d}/space_bomb.yaml", "--out", out]),
        # 3. compressed bombs
        Case("gzip bombs", "run_gzip_bomb", ["run", f"{d}/gz_trace.yaml", "--out", out]),
        Case("gzip bombs", "validate_gzip_bomb", ["validate", f"{d}/gz_trace.yaml"]),
        Case("gzip bombs", "trace_stats_gzip_bomb", ["trace", "stats", f"{d}/bomb.csv.gz"]),
        # 4. a single huge line
        Case("huge line", "trace_stats_huge_line", ["trace", "stats", f"{d}/huge_line.csv"]),
        # 5. grids without a bound
        Case("grids", "sweep_seeds_1e8", ["sweep", str(CHAT), "--seeds", "100000000",
                                          "--out", out]),
        Case("grids", "sweep_5x10000x100", [
            "sweep", str(CHAT), "--set", "speculation.k=1,2,3,4,5",
            "--set", "workload.synthetic.requests=" + ",".join(str(i + 1)
                                                               for i in range(10_000)),
            "--seeds", "100", "--out", out]),
        Case("grids", "plan_space_5x10000x100",
             ["plan", str(CHAT), *PLAN, "--space", f"{d}/space_huge.yaml", "--out", out]),
        # 6. a million workers
        Case("1,000,000 workers", "run_million_workers",
             ["run", str(CHAT), "--set", "hardware.count=1000000", "--set",
              "hardware.tensor_parallel=1", "--out", out],
             check=_line_has("hardware.count")),
        # 7. tracebacks instead of one line
        Case("tracebacks", "plan_malformed_space",
             ["plan", str(CHAT), *PLAN, "--space", f"{d}/space_bad.yaml", "--out", out]),
        Case("tracebacks", "plan_out_proc", ["plan", str(CHAT), *PLAN, "--out", "/proc/x"]),
        Case("tracebacks", "plan_out_readonly", ["plan", str(CHAT), *PLAN, "--out",
                                                 f"{d}/ro"], permissions=True),
        Case("tracebacks", "plan_out_under_a_file", ["plan", str(CHAT), *PLAN, "--out",
                                                     f"{d}/user.txt/x"]),
        Case("tracebacks", "acceptance_import_out_proc",
             ["acceptance", "import", "--from", "csv", f"{d}/acc.csv", "--out",
              "/proc/x.yaml"]),
        Case("tracebacks", "calibrate_threads_minus_1",
             ["calibrate", "--quick", "--threads", "-1"]),
        Case("tracebacks", "run_full_disk", ["run", str(NOSPEC), *SMALL, "--out",
                                             "{full}/out"],
             full_disk=True, check=_line_has("No space left on device"), heavy=True),
        Case("tracebacks", "sweep_full_disk",
             ["sweep", str(NOSPEC), "--set", "workload.synthetic.requests=5", "--quiet",
              "--out", "{full}/out"], full_disk=True,
             check=_line_has("No space left on device"), heavy=True),
        Case("tracebacks", "schema_to_dev_full", ["schema"], stdout="/dev/full",
             check=_line_has("standard output")),
        # 8. silent acceptance of nonsense
        *(Case("nonsense", f"plan_tolerance_{t}", ["plan", str(CHAT), *PLAN, "--tolerance", t,
                                                   "--out", out]) for t in ("0", "nan", "-1")),
        Case("nonsense", "plan_space_unknown_key",
             ["plan", str(CHAT), *PLAN, "--space", f"{d}/space_unknown.yaml", "--out", out]),
        Case("nonsense", "run_out_empty", ["run", str(NOSPEC), *SMALL, "--out", ""]),
        Case("nonsense", "validate_duplicate_yaml_key", ["validate", f"{d}/dup_key.yaml"]),
        Case("nonsense", "trace_stats_duplicate_column",
             ["trace", "stats", f"{d}/dup_columns.csv"]),
        Case("nonsense", "trace_stats_arrival_1e300", ["trace", "stats", f"{d}/far.csv"]),
        Case("nonsense", "validate_tp_3", ["validate", str(CHAT), "--set",
                                           "hardware.tensor_parallel=3"]),
        Case("nonsense", "validate_million_devices",
             ["validate", str(CHAT), "--set", "hardware.count=1000000"]),
        Case("nonsense", "report_emptied_metrics", ["report", f"{d}/run"]),
        # 9. formulas, HTML, a repeated header, SIGTERM
        Case("formulas/HTML", "run_formula_class_and_html_name",
             ["run", str(NOSPEC), *SMALL, "--no-plots", "--set",
              'workload.class==HYPERLINK("http://x")', "--set",
              "name=<script>alert(1)</script>", "--out", out], expect=0, leaves=True,
             check=lambda dd, err: (_csv_escaped("out/requests.csv", "workload_class")(dd, err)
                                    or _md_escaped(dd, err)), heavy=True),
        Case("formulas/HTML", "sweep_formula_name",
             ["sweep", str(NOSPEC), "--set", "workload.synthetic.requests=5", "--set",
              'name==HYPERLINK("x")', "--quiet", "--no-plots", "--out", out],
             expect=0, leaves=True, check=_csv_escaped("out/sweep.csv", "name"),
             heavy=True),
        Case("formulas/HTML", "trace_stats_header_300000_names",
             ["trace", "stats", f"{d}/huge_header.csv"]),
        Case("SIGTERM", "run_sigterm",
             ["run", str(NOSPEC), "--quiet", "--no-report", "--set",
              "workload.synthetic.requests=200000", "--set",
              "simulation.record_iterations=false", "--out", out],
             expect=143, sigterm_after=4.0, check=_terminated, heavy=True),
        # the gaps this session closed: report's readers, the sweep marker
        Case("report folder", "report_huge_line_requests_csv", ["report", f"{d}/run"],
             check=_line_has("SPECSIM_MAX_LINE_BYTES")),
        Case("report folder", "report_json_bomb_metrics", ["report", f"{d}/run"],
             check=_line_has("SPECSIM_MAX_JSON_BYTES")),
        Case("report folder", "report_sweep_users_report_md", ["report", f"{d}/sweep"],
             check=_line_has("report.md was not written by specsim")),
        # a legitimate input just under a cap still runs
        Case("just under a cap", "ok_trace_stats_line_under_cap",
             ["trace", "stats", f"{d}/long_line.csv"], expect=0),
        Case("just under a cap", "ok_validate_100000_workers",
             ["validate", str(CHAT), "--set", "hardware.count=100000", "--set",
              "hardware.tensor_parallel=1"], expect=0, heavy=True),
    ]
    return c


# ---------------------------------------------------------------------------- running
def _limits(space: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (space, space))
    return apply


def _tree(d: Path) -> dict[str, bytes | None]:
    """Every path under ``d`` with its bytes (None for a folder or link)."""
    found: dict[str, bytes | None] = {}
    for root, dirs, files in os.walk(d):
        for name in dirs + files:
            p = Path(root) / name
            rel = str(p.relative_to(d))
            try:
                found[rel] = (None if p.is_dir() or p.is_symlink() else
                              p.read_bytes() if p.stat().st_size < 1 << 20 else
                              str(p.stat().st_size).encode())
            except OSError:
                found[rel] = None
    return found


def _mount_small_tmpfs(where: Path, options: str = "size=64k") -> bool:
    """A 64 KiB tmpfs at ``where`` (root in a container that allows it); False if not."""
    import subprocess

    where.mkdir(exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                       capture_output=True)
    return r.returncode == 0


def run_case(case: Case, d: Path) -> Outcome:
    import subprocess

    mode, mounted = case.mode, None
    if case.full_disk:
        mounted = d / "full" if _mount_small_tmpfs(d / "full") else None
        mode = "plain" if mounted else "enospc"
    if case.permissions and os.geteuid() == 0:  # root writes a 0o500 folder: a read-only fs
        mounted = d / "ro" if _mount_small_tmpfs(d / "ro", "ro,size=64k") else None
        if mounted is None:
            return Outcome("-", 0, 0.0, [], "SKIP", "root ignores a folder's permissions and "
                           "no read-only tmpfs could be mounted (tests/test_outputs.py "
                           "simulates EACCES)")
    try:
        return _run(case, d, mode)
    finally:
        if mounted is not None:
            subprocess.run(["umount", str(mounted)], capture_output=True)


def _run(case: Case, d: Path, mode: str) -> Outcome:
    import subprocess

    argv = [a.replace("{d}", str(d)).replace("{full}", str(d / "full")) for a in case.argv]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1", NUMBA_NUM_THREADS="1", MALLOC_ARENA_MAX="1",
               SPECSIM_MEMORY_LIMIT_GB=os.environ.get("SPECSIM_MEMORY_LIMIT_GB", "100"),
               **case.env)
    before = _tree(d)
    err_path = d.parent / f"{d.name}.stderr"
    with open(err_path, "w") as err_fh, open(case.stdout or os.devnull, "w") as out_fh:
        p = subprocess.Popen([sys.executable, "-c", BOOT, mode, *argv], cwd=d,
                             env=env, stdout=out_fh, stderr=err_fh,
                             preexec_fn=_limits(HEAVY_MEMORY if case.heavy else MEMORY))
        start, rc, usage, termed = time.monotonic(), None, None, False
        while rc is None:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                rc = os.waitstatus_to_exitcode(status)
                break
            waited = time.monotonic() - start
            if case.sigterm_after is not None and not termed and waited > case.sigterm_after:
                os.kill(p.pid, signal.SIGTERM)
                termed = True
            if waited > LIMIT_S:
                os.kill(p.pid, signal.SIGKILL)
                _, status, usage = os.wait4(p.pid, 0)
                rc = "timeout"
            time.sleep(0.02)
        p.returncode = rc if isinstance(rc, int) else -9  # reaped here, not by Popen
    err = err_path.read_text(errors="replace")
    lines = err.splitlines()
    after = _tree(d)
    left = sorted(k for k in after if k not in before or (before[k] != after[k]
                                                          and after[k] is not None))
    rss = usage.ru_maxrss / 1024 if usage is not None else float("nan")
    why = []
    if rc != case.expect:
        why.append(f"exit {rc}, expected {case.expect}")
    if "Traceback" in err:
        why.append("traceback")
    if case.expect == 2 and len(lines) != 1:
        why.append(f"{len(lines)} stderr lines")
    if rss > MEMORY / 1024**2:
        why.append(f"peak RSS {rss:.0f} MB")
    if left and not case.leaves:
        why.append("left/changed: " + ", ".join(left[:3]))
    if case.check is not None and not why:
        try:
            problem = case.check(d, err)
        except Exception as exc:  # a check that cannot read its output fails the case
            problem = f"check failed: {exc}"
        if problem:
            why.append(problem)
    how = {"enospc": " (simulated ENOSPC)"}.get(mode, " (64 KiB tmpfs)" if case.full_disk
                                                else "")
    return Outcome(rc, len(lines), rss, left if not case.leaves else [],
                   ("FAIL" if why else "PASS") + how, "; ".join(why),
                   lines[0] if lines else "", err)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", default=[], help="cases whose name contains one")
    ap.add_argument("--lines", action="store_true", help="print each case's stderr line too")
    ap.add_argument("--show-failures", action="store_true",
                    help="print a failing case's whole stderr (to stderr)")
    args = ap.parse_args(argv)
    chosen = [c for c in cases() if not args.only or any(o in c.name for o in args.only)]
    tmp = Path(tempfile.mkdtemp(prefix="specsim-audit-"))
    rows = []
    try:
        for case in chosen:
            d = tmp / case.name
            _setup(d, case.name)
            if case.name in PREPARE:
                PREPARE[case.name](d)
            o = run_case(case, d)
            rows.append((case, o))
            print(f"{o.verdict} {case.name}", file=sys.stderr, flush=True)
            if o.verdict.startswith("FAIL") and args.show_failures:
                print(o.err[-3000:], file=sys.stderr, flush=True)
    finally:
        for p in tmp.rglob("ro"):
            p.chmod(0o755)
        shutil.rmtree(tmp, ignore_errors=True)
    print("| case | bullet | exit | stderr lines | peak RSS (MB) | left behind | result |")
    print("|---|---|---|---|---|---|---|")
    for case, o in rows:
        if o.verdict == "SKIP":
            print(f"| {case.name} | {case.bullet} | - | - | - | - | SKIP: {o.why} |")
            continue
        result = o.verdict + (f": {o.why}" if o.why else "")
        print(f"| {case.name} | {case.bullet} | {o.rc} | {o.lines} | {o.rss_mb:.0f} | "
              f"{', '.join(o.left) or '-'} | {result} |")
        if args.lines:
            print(f"|  | | | | | | `{o.first[:160]}` |")
    failed = sum(o.verdict.startswith("FAIL") for _, o in rows)
    passed = sum(o.verdict.startswith("PASS") for _, o in rows)
    print(f"\n{passed} PASS, {failed} FAIL, {len(rows) - passed - failed} SKIP (RLIMIT_AS "
          f"{MEMORY // 1024**2} MB, {HEAVY_MEMORY // 1024**3} GiB for a case doing real work; "
          f"peak RSS under {MEMORY // 1024**2} MB and {LIMIT_S:g} s for every case)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
