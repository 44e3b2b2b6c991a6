"""Fuzz the other front doors: plan, sweep, replay, acceptance import, calibrate
(--from-measurements, --from-profiles, --from-steps), report.

``tests/test_scenario_fuzz.py`` covers ``run`` / ``validate`` and ``test_trace_fuzz.py`` the
trace readers; this file feeds the remaining commands random bad inputs -- space files,
``--set`` grids, flag values, measured-run CSVs, acceptance measurements, calibration
tables, run folders with mangled files -- mixed with good ones. Each case must exit 0, or
exit 2 with exactly one ``specsim: error:`` line on stderr: never a traceback, a
MemoryError or a hang. The base scenario is ``chat.yaml`` cut to 20 requests on the numpy
kernel, and the memory budget is 2 GB, so a case that is accepted runs in seconds.

Deterministic by default (``derandomize``, few examples); ``SPECSIM_FUZZ_EXAMPLES=200
SPECSIM_FUZZ_RANDOM=1 pytest tests/test_front_door_fuzz.py`` explores further.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import signal
import tempfile
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specsim.simulator.cli import main

REPO = Path(__file__).resolve().parents[1]
HANG_S = 60
EXAMPLES = int(os.environ.get("SPECSIM_FUZZ_EXAMPLES", "8"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    derandomize=not os.environ.get("SPECSIM_FUZZ_RANDOM"),
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])

# ---------------------------------------------------------------------------- values
NUMBERS = ["0", "-1", "1", "2", "3", "0.5", "1e-300", "1e300", "nan", "inf", "-inf", "abc", "",
           "1_000", "9" * 30, "0x10", " 4 ", "1e400"]
SCALARS = [0, -1, 1, 2, 3, 0.5, 1e-300, 1e300, math.nan, math.inf, None, True, "", "abc",
           "H100-SXM", [], {}, [1, 2], {"a": 1}, 2**63, "\x00", "a\nb"]
KEYS = ["speculation.k", "workload.synthetic.arrival.rate", "scheduler.max_batch",
        "hardware.tensor_parallel", "hardware.accelerator", "speculation.method", "seed",
        "hardware.bogus", "bogus", "speculation", "workload.synthetic.requests", "", ".",
        "a..b", "disaggregation"]

numbers = st.one_of(st.sampled_from(NUMBERS), st.integers(-5, 50).map(str),
                    st.floats(allow_nan=True, allow_infinity=True).map(repr))
scalars = st.one_of(st.sampled_from(SCALARS), st.integers(-3, 8),
                    st.floats(-10, 10, allow_nan=False), st.text(max_size=6))
junk = st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode))


def _dump(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()


def _base(tmp: Path) -> Path:
    data = yaml.safe_load((REPO / "scenarios" / "chat.yaml").read_text())
    data["workload"]["synthetic"]["requests"] = 20
    data["workload"]["max_requests"] = 20
    data["simulation"] = {"compiled": False}  # no kernel compile inside a case's time limit
    path = tmp / "base.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# ---------------------------------------------------------------------------- the check
class Hang(Exception):
    pass


def _on_alarm(signum, frame):  # noqa: ARG001
    raise Hang(f"no answer within {HANG_S} s")


def _check(argv: list[str]) -> None:
    err, out = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(HANG_S)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                rc = main(argv)
            except SystemExit as exc:  # argparse refusing a flag or a choice
                rc = exc.code
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    text = err.getvalue()
    if rc == 2:
        lines = text.splitlines()
        assert len(lines) == 1 and lines[0].startswith("specsim: error: "), (argv, text)
        assert "Traceback" not in text and "np.float64" not in text, (argv, text)
        return
    assert rc == 0, (argv, rc, text)


@pytest.fixture(autouse=True)
def _small_memory_budget(monkeypatch):
    monkeypatch.setenv("SPECSIM_MEMORY_LIMIT_GB", "2")


# ---------------------------------------------------------------------------- plan
@st.composite
def space_files(draw) -> bytes:
    pick = draw(st.integers(0, 5))
    if pick == 0:
        return draw(junk)
    if pick == 1:
        return _dump(draw(st.one_of(scalars, st.lists(scalars, max_size=3)))).encode()
    space = draw(st.dictionaries(st.sampled_from(KEYS), st.one_of(
        scalars, st.lists(scalars, min_size=0, max_size=2)), max_size=2))
    if pick >= 4:  # one good configuration: the plan runs
        space = {"speculation.k": [draw(st.integers(0, 4))]}
    return yaml.safe_dump(space).encode()


@SETTINGS
@given(space=space_files(), qps=st.one_of(st.just("2"), numbers),
       tol=st.one_of(st.just("0.5"), numbers), requests=st.one_of(st.just("20"), numbers),
       duration=st.one_of(st.just("1"), numbers))
def test_plan_front_door(space, qps, tol, requests, duration):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "space.yaml").write_bytes(space)
        _check(["plan", str(_base(tmp)), "--slo", "tpot_p99=0.5", "--qps", qps,
                "--tolerance", tol, "--requests", requests, "--duration", duration,
                "--space", str(tmp / "space.yaml"), "--quiet"])


# ---------------------------------------------------------------------------- sweep
@st.composite
def set_flags(draw) -> list[str]:
    out = []
    for _ in range(draw(st.integers(0, 2))):
        pick = draw(st.integers(0, 3))
        if pick == 0:
            out.append(draw(st.text(max_size=30)))
        else:
            key = draw(st.sampled_from(KEYS))
            vals = draw(st.lists(scalars, min_size=1, max_size=2))
            if pick == 3:  # a good value
                key, vals = "speculation.k", [draw(st.integers(0, 4))]
            out.append(f"{key}=" + ",".join(_dump(v) for v in vals))
    return [x for s in out for x in ("--set", s)]


@SETTINGS
@given(sets=set_flags(), seeds=st.one_of(st.just("1"), numbers),
       jobs=st.one_of(st.just("1"), numbers), zipped=st.booleans())
def test_sweep_front_door(sets, seeds, jobs, zipped):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        _check(["sweep", str(_base(tmp)), *sets, "--seeds", seeds, "--jobs", jobs,
                *(["--zip"] if zipped else []), "--quiet", "--no-plots",
                "--out", str(tmp / "out")])


# ---------------------------------------------------------------------------- replay
REPLAY_COLUMNS = ["arrival_s", "input_tokens", "output_tokens", "ttft_s", "e2e_s", "stage",
                  "request_id", "has_error"]
cells = st.one_of(st.sampled_from(["0", "1", "0.5", "-1", "nan", "inf", "1e300", "", "abc",
                                   "100", "2.5", "true"]), st.integers(0, 200).map(str))


@st.composite
def measured_csv(draw) -> bytes:
    if draw(st.integers(0, 4)) == 0:
        return draw(junk)
    cols = REPLAY_COLUMNS[:5] if draw(st.booleans()) else draw(
        st.lists(st.sampled_from(REPLAY_COLUMNS), min_size=1, max_size=6, unique=True))
    rows = []
    good = draw(st.booleans())
    for i in range(draw(st.integers(0, 4))):
        if good:
            row = {"arrival_s": str(i * 0.5), "input_tokens": "100", "output_tokens": "20",
                   "ttft_s": "0.05", "e2e_s": "0.5", "stage": "0", "request_id": str(i),
                   "has_error": "false"}
            rows.append([row[c] for c in cols])
        else:
            rows.append([draw(cells) for _ in cols])
    return ("\n".join([",".join(cols), *(",".join(r) for r in rows)]) + "\n").encode()


@SETTINGS
@given(data=measured_csv(), tp=st.one_of(st.just("1"), numbers),
       limit=st.one_of(st.just("3"), numbers),
       model=st.sampled_from(["Qwen3-8B", "nope", None]),
       hardware=st.sampled_from(["H100-SXM", "nope", None]))
def test_replay_front_door(data, tp, limit, model, hardware):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "run.csv").write_bytes(data)
        flags = [*(["--model", model] if model else []),
                 *(["--hardware", hardware] if hardware else [])]
        _check(["replay", str(tmp / "run.csv"), "--tp", tp, "--limit", limit, *flags,
                "--quiet"])


# ---------------------------------------------------------------------------- acceptance
@st.composite
def acceptance_file(draw) -> tuple[str, bytes]:
    source = draw(st.sampled_from(["prometheus", "csv", "specdec"]))
    pick = draw(st.integers(0, 3))
    if pick == 0:
        return source, draw(junk)
    if source == "prometheus":
        names = ["vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
                 "vllm:spec_decode_num_accepted_tokens_total",
                 'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0"}',
                 'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1"}']
        lines = [f"{n} {draw(cells) or '0'}" for n in names if draw(st.booleans())]
        if pick == 3:
            lines = [f"{names[0]} 100", f"{names[1]} 400", f"{names[2]} 250",
                     f"{names[3]} 90", f"{names[4]} 70"]
        return source, ("\n".join(lines) + "\n").encode()
    if source == "csv":
        head = draw(st.sampled_from(["position,accepted,drafted", "position,rate",
                                     "position,alpha", "a,b"]))
        rows = [",".join(draw(cells) for _ in head.split(","))
                for _ in range(draw(st.integers(0, 4)))]
        if pick == 3:
            head, rows = "position,alpha", ["0,0.8", "1,0.7", "2,0.6"]
        return source, ("\n".join([head, *rows]) + "\n").encode()
    doc = draw(st.one_of(scalars, st.lists(st.dictionaries(
        st.sampled_from(["drafter", "k", "tau", "accepted", "prompt_kind", "runs"]), scalars,
        max_size=3), max_size=3)))
    return source, _dump(doc).encode()


@SETTINGS
@given(case=acceptance_file(), k=st.one_of(st.just("4"), numbers),
       form=st.sampled_from(["positions", "tau"]))
def test_acceptance_import_front_door(case, k, form):
    source, data = case
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "in.txt").write_bytes(data)
        _check(["acceptance", "import", str(tmp / "in.txt"), "--from", source, "--out",
                str(tmp / "profile.yaml"), "--k", k, "--form", form])


# ---------------------------------------------------------------------------- calibrate
MEASURED = ["model", "hardware", "tensor_parallel", "batch_size", "prompt_len", "prefill_ms",
            "decode_ms_per_token"]


@st.composite
def measurements_csv(draw) -> bytes:
    if draw(st.integers(0, 3)) == 0:
        return draw(junk)
    cols = MEASURED if draw(st.booleans()) else draw(
        st.lists(st.sampled_from(MEASURED), min_size=1, max_size=7, unique=True))
    good = draw(st.booleans())
    rows = []
    for i in range(draw(st.integers(0, 6))):
        if good:
            row = {"model": "Qwen3-8B", "hardware": "H100-SXM", "tensor_parallel": "1",
                   "batch_size": str(1 + i), "prompt_len": str(128 * (1 + i % 3)),
                   "prefill_ms": str(10 + 3 * i), "decode_ms_per_token": str(8 + 0.5 * i)}
            rows.append(",".join(row[c] for c in cols))
        else:
            rows.append(",".join(draw(cells) for _ in cols))
    return ("\n".join([",".join(cols), *rows]) + "\n").encode()


@SETTINGS
@given(data=measurements_csv())
def test_calibrate_from_measurements_front_door(data):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "m.csv").write_bytes(data)
        _check(["calibrate", "--from-measurements", str(tmp / "m.csv"), "--out",
                str(tmp / "cal.yaml")])


@SETTINGS
@given(files=st.dictionaries(st.sampled_from([
    "compute/h100/mlp.csv", "compute/h100/attention.csv", "network/h100_pairwise/all_reduce.csv",
    "attention_h100/attention.csv", "mlp.csv", "README"]), junk, max_size=3),
    hardware=st.sampled_from(["h100", "a100", "H100-SXM", "nope"]))
def test_calibrate_from_profiles_front_door(files, hardware):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, data in files.items():
            (tmp / "prof" / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / "prof" / name).write_bytes(data)
        (tmp / "prof").mkdir(exist_ok=True)
        _check(["calibrate", "--from-profiles", str(tmp / "prof"), "--hardware", hardware,
                "--out", str(tmp / "cal.yaml")])


@st.composite
def steps_file(draw) -> bytes:
    """A forward-pass table as gpu_steps.py writes it (JSON lines), good rows mixed with bad
    values, missing keys, bad kinds and plain junk."""
    if draw(st.integers(0, 4)) == 0:
        return draw(junk)
    lines = []
    if draw(st.booleans()):
        lines.append(json.dumps({"kind": "info", "device": "NVIDIA H200",
                                 "matmul_tflops": draw(st.one_of(st.just(807.5), scalars)),
                                 "copy_gb_s": 4258.9}, default=str))
    for i in range(draw(st.integers(0, 8))):
        row: dict[str, Any] = {"kind": draw(st.sampled_from(["decode", "prefill", "verify",
                                                              "bogus"])),
                               "model": draw(st.sampled_from(["llama-3.1-8b", "llama-3.2-1b",
                                                              "nope"])),
                               "batch": 1 + i, "q": 1 + i % 3, "context": 512 * (1 + i),
                               "tokens": (1 + i) * (1 + i % 3), "seconds": 0.005 + 0.001 * i}
        for key in draw(st.lists(st.sampled_from(list(row)), max_size=2, unique=True)):
            if draw(st.booleans()):
                row[key] = draw(scalars)
            else:
                row.pop(key)
        lines.append(json.dumps(row, default=str))
    return ("\n".join(lines) + "\n").encode()


@SETTINGS
@given(data=steps_file(), hardware=st.sampled_from(["H200-SXM", "H100-SXM", "nope", None]))
def test_calibrate_from_steps_front_door(data, hardware):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "steps.jsonl").write_bytes(data)
        argv = ["calibrate", "--from-steps", str(tmp / "steps.jsonl"), "--out",
                str(tmp / "cal.yaml")]
        _check(argv + (["--hardware", hardware] if hardware else []))


# ---------------------------------------------------------------------------- report
@st.composite
def run_folder(draw) -> dict[str, bytes]:
    metrics: Any = {"scenario": "x", "seed": 1, "calibration": "assumed",
                    "requests_completed": 1, "ttft_s": {}, "tpot_s": {}, "e2e_s": {}}
    for key in draw(st.lists(st.sampled_from(list(metrics)), max_size=3)):
        metrics[key] = draw(scalars)
    if draw(st.booleans()):
        metrics = draw(st.one_of(scalars, st.just({})))
    files = {".specsim-output": json.dumps({"files": ["metrics.json"]}).encode(),
             "metrics.json": json.dumps(metrics, default=str).encode(),
             "requests.csv": draw(st.one_of(junk, st.just(b"request_id\n0\n")))}
    if draw(st.integers(0, 3)) == 0:
        files[draw(st.sampled_from(list(files)))] = draw(junk)
    return files


@SETTINGS
@given(files=run_folder())
def test_report_front_door(files):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "run"
        folder.mkdir()
        for name, data in files.items():
            (folder / name).write_bytes(data)
        (folder / "report.md").write_text("the good report\n")
        _check(["report", str(folder)])
        if files["metrics.json"] in (b"{}", b"[]", b"null"):
            assert (folder / "report.md").read_text() == "the good report\n"
