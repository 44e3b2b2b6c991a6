"""Fuzz the scenario front door: every input ends in a run or in one ``specsim: error:`` line.

A small bundled scenario (``scenarios/chat.yaml`` cut to 20 requests) is mutated: keys that
exist and typos, values of every YAML type, NaN and infinities, huge and negative numbers,
overrides through ``--set``, random bytes as the whole file. For each case ``specsim run``
and ``specsim validate`` must either exit 0 (and the run's conservation laws hold) or exit
2 with exactly one stderr line; never an uncaught exception, a MemoryError or a hang.

Deterministic by default (``derandomize``); ``SPECSIM_FUZZ_EXAMPLES=500
SPECSIM_FUZZ_RANDOM=1 pytest tests/test_scenario_fuzz.py`` explores further.
"""

from __future__ import annotations

import contextlib
import copy
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

from specsim.cost_models.catalog import hardware_catalog, model_catalog
from specsim.simulator.cli import main
from specsim.simulator.scenario import schema

REPO = Path(__file__).resolve().parents[1]
HANG_S = 20
N_REQUESTS = 20


def _base() -> dict[str, Any]:
    data = yaml.safe_load((REPO / "scenarios" / "chat.yaml").read_text())
    data["workload"]["synthetic"]["requests"] = N_REQUESTS
    data["workload"]["max_requests"] = N_REQUESTS  # holds even when `requests` is mutated
    return data


def _leaf_paths(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, dict):
        out = []
        for k, v in node.items():
            out += _leaf_paths(v, f"{prefix}{k}.")
        return out or [prefix[:-1]]
    return [prefix[:-1]]


def _inline() -> dict[str, Any]:
    """BASE with its accelerator and model written out inline (the catalog's own fields)."""
    data = copy.deepcopy(_base())
    data["hardware"]["accelerator"] = copy.deepcopy(hardware_catalog()["H100-SXM"])
    data["model"] = copy.deepcopy(model_catalog()[data["model"]])
    return data


BASE = _base()
INLINE = _inline()
EXISTING = sorted(set(_leaf_paths(BASE)) | set(schema.leaf_keys()) - {""})
CATALOG_KEYS = sorted(p for p in _leaf_paths(INLINE)
                      if p.startswith(("hardware.accelerator.", "model.")))
SECTIONS = sorted({p.rsplit(".", 1)[0] for p in EXISTING if "." in p})
WORKLOAD_KEYS = ["workload.synthetic.duration_s", "workload.synthetic.arrival.cv",
                 "workload.synthetic.shared_prefix_tokens", "workload.temperature",
                 "workload.speedup", "workload.qps", "workload.start_s", "workload.end_s",
                 "workload.max_context", "workload.context_overflow", "workload.seed",
                 "workload.sample.fraction", "workload.sample.n", "workload.class_mix",
                 "speculation.acceptance.alpha", "speculation.acceptance.tau",
                 "speculation.acceptance.at_k", "speculation.acceptance.histogram",
                 "speculation.acceptance.alpha_by_position",
                 "speculation.acceptance.per_request.concentration",
                 "speculation.acceptance.temperature_sensitivity"]

SPECIAL = [math.nan, math.inf, -math.inf, 1e18, 10**30, -(10**30), -1, -5.0, 0, 0.0, 1e-300,
           1e300, 2.5, 3.0, 1e3, "1e3", "", "abc", "H100-SXM", True, False, None, [], [1, 2],
           [math.nan], {}, {"a": 1}, {"alpha": 0.5}, {"tau": 3.0, "at_k": math.nan},
           {"histogram": [1] * 80, "at_k": 4}, 2**53 + 1, 2**63, "\x00", "a\nb"]

values = st.one_of(
    st.sampled_from(SPECIAL),
    st.integers(-1000, 1000),
    st.floats(-1e4, 1e4, allow_nan=False),
    st.text(max_size=8),
    st.booleans(),
    st.none(),
    st.lists(st.one_of(st.integers(-5, 100), st.floats(allow_nan=True)), max_size=4),
    st.dictionaries(st.text(max_size=6), st.integers(-5, 5), max_size=2),
)


@st.composite
def typo(draw) -> str:
    """A real key path with one part misspelt, or a new key in a real section."""
    path = draw(st.sampled_from(EXISTING)).split(".")
    if draw(st.booleans()):
        i = draw(st.integers(0, len(path) - 1))
        word = path[i]
        j = draw(st.integers(0, max(len(word) - 1, 0)))
        path[i] = word[:j] + draw(st.sampled_from("xz_")) + word[j + 1:]
        return ".".join(path)
    section = draw(st.sampled_from(["", *SECTIONS]))
    name = draw(st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8))
    return f"{section}.{name}" if section else name


def _lookup(tree: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return None
        tree = tree[part]
    return tree


@st.composite
def plausible(draw, key: str) -> Any:
    """A value of the right type near the scenario's own, so that many cases run."""
    field = schema.key_info(key)
    base = _lookup(INLINE if key in CATALOG_KEYS else BASE, key)
    if field is not None:
        if field.kind == "choice":
            return draw(st.sampled_from(field.choices))
        if field.kind == "bool":
            return draw(st.booleans())
        if field.kind in ("int", "float"):
            lo = field.lo if field.lo is not None else 0
            ref = base if isinstance(base, int | float) else field.default
            top = max(2 * float(ref or 1), lo + 1)
            top = min(top, field.hi) if field.hi is not None else top
            if field.kind == "int":
                return draw(st.integers(int(lo), max(int(top), int(lo))))
            return draw(st.floats(lo, top))
    if isinstance(base, bool):
        return draw(st.booleans())
    if isinstance(base, int | float):
        return type(base)(base * draw(st.floats(0.05, 3)))
    if field is not None:  # str, ref, mapping: keep what the scenario has
        return copy.deepcopy(base if base is not None else field.default)
    return draw(values)


@st.composite
def tame(draw) -> tuple[str, Any, bool]:
    """A real key and a value of its type: most such cases should run."""
    key = draw(st.sampled_from(EXISTING))
    return key, draw(plausible(key)), draw(st.booleans())


@st.composite
def mutation(draw) -> tuple[str, Any, bool]:
    """(dotted key, value, through --set?)."""
    pick = draw(st.integers(0, 9))  # mostly real keys, some deeper ones, some typos
    key = draw(st.sampled_from(EXISTING) if pick < 6 else
               st.sampled_from(WORKLOAD_KEYS) if pick < 8 else typo())
    value = draw(plausible(key)) if draw(st.integers(0, 3)) else draw(values)
    return key, value, draw(st.booleans())


@st.composite
def cases(draw) -> tuple[str, Any]:
    pick = draw(st.integers(0, 9))
    if pick == 0:
        return "bytes", draw(st.binary(max_size=300))
    if pick == 1:
        return "text", draw(st.text(max_size=200))
    if pick == 2:  # an inline accelerator and model, fields mutated
        muts = []
        for _ in range(draw(st.integers(1, 2))):
            key = draw(st.sampled_from(CATALOG_KEYS))
            value = draw(plausible(key)) if draw(st.booleans()) else draw(values)
            muts.append((key, value, draw(st.booleans())))
        return "inline", muts
    if pick < 6:
        return "mutate", draw(st.lists(tame(), min_size=1, max_size=3))
    return "mutate", draw(st.lists(mutation(), min_size=1, max_size=3))


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    node = data
    parts = dotted.split(".")
    for p in parts[:-1]:
        nxt = node.get(p) if isinstance(node, dict) else None
        if not isinstance(nxt, dict):
            nxt = {}
            node[p] = nxt
        node = nxt
    node[parts[-1]] = value


def _as_override(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6)
    return text.removesuffix("\n").removesuffix("\n...").strip()


class Hang(Exception):
    pass


def _on_alarm(signum, frame):  # noqa: ARG001
    raise Hang(f"no answer within {HANG_S} s")


def _invoke(argv: list[str]) -> tuple[int, str]:
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        rc = main(argv)
    return rc, err.getvalue()


def _check(argv: list[str], out_dir: Path | None) -> None:
    rc, err = _invoke(argv)
    if rc == 2:
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("specsim: error: "), err
        assert "Traceback" not in err and "np.float64" not in err, err
        return
    assert rc == 0, (rc, err)
    if out_dir is not None:
        m = json.loads((out_dir / "metrics.json").read_text())
        assert m["requests_arrived"] == (m["requests_completed"] + m["requests_rejected"]
                                         + m["requests_in_flight"])
        assert m["output_tokens"] == m["accepted_tokens"] + m["bonus_tokens"]
        assert m["requests_truncated_to_context"] >= 0
        assert m["requests_dropped_for_context"] >= 0


EXAMPLES = int(os.environ.get("SPECSIM_FUZZ_EXAMPLES", "60"))


@pytest.fixture(autouse=True)
def _small_memory_budget(monkeypatch):
    # a mutated fleet or request count is refused above 2 GB instead of filling the machine
    monkeypatch.setenv("SPECSIM_MEMORY_LIMIT_GB", "2")


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          derandomize=not os.environ.get("SPECSIM_FUZZ_RANDOM"),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=cases())
def test_scenario_fuzz(case):
    kind, payload = case
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scenario.yaml"
        sets: list[str] = []
        if kind == "bytes":
            path.write_bytes(payload)
        elif kind == "text":
            path.write_text(payload)
        else:
            data = copy.deepcopy(INLINE if kind == "inline" else BASE)
            for key, value, via_set in payload:
                if via_set:
                    sets += ["--set", f"{key}={_as_override(value)}"]
                else:
                    _set(data, key, value)
            path.write_text(yaml.safe_dump(data, sort_keys=False))
        out_dir = Path(tmp) / "out"
        old = signal.signal(signal.SIGALRM, _on_alarm)
        signal.alarm(HANG_S)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)  # overflow / invalid value
                _check(["run", str(path), "--quiet", "--no-report", "--out", str(out_dir), *sets],
                       out_dir)
                _check(["validate", str(path), *sets], None)
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
