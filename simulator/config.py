"""Scenario files: load, apply ``--set`` overrides, validate.

Validation is strict: unknown keys are errors (a typo must not silently fall back to a
default), types and ranges are checked, and every message names the key path. The
``workload`` section is validated by ``traces``; catalog references by ``cost_models``.
"""

from __future__ import annotations

import copy
import difflib
import math
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from . import yamlio
from .errors import ScenarioError

# A schema node is a dict of key -> Field, or a Field.


@dataclass(frozen=True)
class Field:
    """One scenario key: its kind, default and allowed range/choices."""

    kind: str  # int | float | bool | str | choice | any | mapping | ref | list
    default: Any = None
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()
    nullable: bool = False
    exclusive_lo: bool = False
    help: str = ""


# Integer keys without their own upper bound stop here: beyond 2**53 a YAML float such as
# 1e18 no longer holds an exact integer, and numpy's int64 arithmetic would overflow.
INT_HI = 2**53
MAX_DEVICES = 1_000_000  # a sanity bound on hardware.count (the memory check comes later)
MAX_SCENARIO_BYTES = 64 * 1024**2  # a scenario file is a page of YAML, not a trace

SPEC_METHODS = ("none", "draft_model", "eagle3", "mtp", "ngram", "pard", "dflash")

SCHEMA: dict[str, Any] = {
    "name": Field("str", "scenario"),
    "description": Field("str", ""),
    "seed": Field("int", 0, lo=0, hi=2**63 - 1),
    "hardware": {
        "accelerator": Field("ref", "H100-SXM", help="catalog name or inline mapping"),
        "count": Field("int", 1, lo=1, hi=MAX_DEVICES, help="devices in the fleet"),
        "tensor_parallel": Field("int", 1, lo=1, hi=MAX_DEVICES, help="devices per worker"),
        "memory_fraction": Field("float", 0.90, lo=0.0, hi=1.0, exclusive_lo=True,
                                 help="share of HBM the engine may use (weights + KV)"),
    },
    "model": Field("ref", "Llama-3.1-8B"),
    "quantization": {
        "weights": Field("str", "bf16"),
        "activations": Field("str", "bf16"),
        "kv_cache": Field("str", "bf16"),
    },
    "speculation": {
        "method": Field("choice", "none", choices=SPEC_METHODS),
        "k": Field("int", 4, lo=0, hi=64),
        "policy": Field("choice", "static", choices=("static", "off")),
        "drafter": Field("ref", None, nullable=True),
        "drafter_quantization": {
            "weights": Field("str", "bf16"),
            "activations": Field("str", "bf16"),
            "kv_cache": Field("str", "bf16"),
        },
        "draft_cost": {
            "ratio": Field("float", None, lo=0.0, hi=1e3, nullable=True,
                           help="draft time per drafted token / one target decode step"),
            "seconds_per_token": Field("float", None, lo=0.0, hi=3600.0, nullable=True),
        },
        "acceptance": Field("mapping", None, nullable=True),
        "ngram": {
            "match_rate": Field("float", 1.0, lo=0.0, hi=1.0,
                                help="share of steps where the lookup finds a match"),
            "cpu_s_per_step": Field("float", 20e-6, lo=0.0, hi=3600.0,
                                    help="assumed default (a compiled lookup); measure yours"),
        },
        "overlap_draft": Field("bool", False),
    },
    "scheduler": {
        "policy": Field("choice", "fcfs", choices=("fcfs",)),
        "max_batch": Field("int", 256, lo=1),
        "token_budget": Field("int", 8192, lo=1),
        "chunked_prefill": Field("bool", True),
        "block_size": Field("int", 16, lo=1),
        "max_queue": Field("int", None, lo=0, nullable=True),
    },
    "router": {"policy": Field("choice", "round_robin", choices=("round_robin", "least_loaded"))},
    "workload": Field("mapping", None),
    "slo": {
        "ttft_s": Field("float", None, lo=0.0, exclusive_lo=True, nullable=True),
        "tpot_s": Field("float", None, lo=0.0, exclusive_lo=True, nullable=True),
    },
    "cost": {
        "price_usd_per_hour": Field("float", None, lo=0.0, hi=1e6, nullable=True,
                                    help="per device; overrides the catalog's dated default"),
        "power_idle_w": Field("float", None, lo=0.0, hi=1e7, nullable=True),
        "power_max_w": Field("float", None, lo=0.0, hi=1e7, nullable=True),
    },
    "calibration": Field("str", None, nullable=True),
    "simulation": {
        "horizon_s": Field("float", None, lo=0.0, hi=1e9, exclusive_lo=True, nullable=True,
                           help="stop here; unfinished requests are counted in flight"),
        "record_iterations": Field("bool", True),
        "progress": Field("bool", True),
        "fast_path": Field("bool", True, help="advance all-decode batches many steps at once"),
    },
}


def show(value: Any, limit: int = 60) -> str:
    """A value as an error message quotes it: repr, numpy scalars as plain numbers, short."""
    if hasattr(value, "item") and not isinstance(value, list | dict | str | bytes):
        try:
            value = value.item()  # np.float64(-5.0) -> -5.0
        except (TypeError, ValueError):
            pass
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _num(x: float) -> str:
    """A bound as a person writes it: 1, 0.9, 1000000, 1e+09."""
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) < 1e7):
        return f"{int(x)}"
    return f"{x:g}"


def _check_number(f: Field, value: Any, path: str) -> Any:
    """int and float keys: a finite YAML number; ints also take integral floats (1e3, 4.0)."""
    word = "an integer" if f.kind == "int" else "a number"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ScenarioError(f"{path}: expected {word}, got {show(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ScenarioError(f"{path}: expected a finite number, got {value}")
    given = value  # messages quote what was written (1e+30, not its int)
    if f.kind == "int":
        if isinstance(value, float):
            if not value.is_integer():
                raise ScenarioError(f"{path}: expected an integer, got {show(value)}")
            value = int(value)
    else:
        value = float(value)
    hi = f.hi if f.hi is not None else (INT_HI if f.kind == "int" else None)
    if f.lo is not None and (value < f.lo or (f.exclusive_lo and value == f.lo)):
        rel = "greater than" if f.exclusive_lo else "at least"
        raise ScenarioError(f"{path}: expected {word} {rel} {_num(f.lo)}, got {show(given)}")
    if hi is not None and value > hi:
        raise ScenarioError(f"{path}: expected {word} at most {_num(hi)}, got {show(given)}")
    return value


def _check_field(f: Field, value: Any, path: str) -> Any:
    if value is None:
        if f.nullable or f.kind in ("any",):
            return None
        raise ScenarioError(f"{path}: expected a value, got null")
    kind = f.kind
    if kind in ("int", "float"):
        return _check_number(f, value, path)
    if kind == "bool":
        if not isinstance(value, bool):
            raise ScenarioError(f"{path}: expected true or false, got {show(value)}")
    elif kind == "str":
        if not isinstance(value, str):
            raise ScenarioError(f"{path}: expected a string, got {show(value)}")
    elif kind == "choice":
        if not isinstance(value, str) or value not in f.choices:
            raise ScenarioError(f"{path}: expected one of {', '.join(f.choices)}, got "
                                f"{show(value)}")
    elif kind == "ref":
        if not isinstance(value, str | dict):
            raise ScenarioError(f"{path}: expected a catalog name or an inline mapping, got "
                                f"{show(value)}")
    elif kind == "mapping":
        if not isinstance(value, dict):
            raise ScenarioError(f"{path}: expected a mapping, got {show(value)}")
    return value


def validate(data: Any, schema: dict[str, Any] = SCHEMA, prefix: str = "") -> dict[str, Any]:
    """A copy of ``data`` with defaults filled in; raises on unknown keys or bad values."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        where = prefix[:-1] if prefix else "scenario"
        raise ScenarioError(f"{where}: expected a mapping, got {show(data)}")
    unknown = sorted(set(data) - set(schema), key=str)
    if unknown:
        bad = unknown[0]
        name = bad if isinstance(bad, str) and bad.isprintable() and len(bad) <= 60 \
            else show(bad)
        hint = difflib.get_close_matches(bad, list(schema), n=1) if isinstance(bad, str) else []
        tip = f"did you mean {hint[0]!r}? " if hint else ""
        raise ScenarioError(f"{prefix}{name}: unknown key ({tip}expected one of: "
                            f"{', '.join(schema)})")
    out: dict[str, Any] = {}
    for key, node in schema.items():
        path = f"{prefix}{key}"
        if isinstance(node, dict):
            out[key] = validate(data.get(key), node, f"{path}.")
        else:
            out[key] = _check_field(node, data.get(key, copy.deepcopy(node.default)), path)
    return out


def check_consistency(sc: dict[str, Any]) -> None:
    """Rules that involve two keys of a validated scenario."""
    spec, sched = sc["speculation"], sc["scheduler"]
    k = spec["k"]
    if spec["method"] != "none" and spec["policy"] != "off" and sched["token_budget"] < k + 1:
        # a decode step verifies k drafts plus one token: a smaller budget would silently
        # shrink every draft (speculation off in effect)
        raise ScenarioError(f"scheduler.token_budget: expected at least speculation.k + 1 = "
                            f"{k + 1} (a decode step verifies k drafted tokens plus one), got "
                            f"{sched['token_budget']}; raise it or lower speculation.k")


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (["a", "b", "c"], YAML-parsed value)."""
    shown = text if text.isprintable() and len(text) <= 80 else show(text, 80)
    if "=" not in text:
        raise ScenarioError(f"--set {shown}: expected key.path=value")
    key, raw = text.split("=", 1)
    parts = [p for p in key.strip().split(".")]
    if not all(parts):
        raise ScenarioError(f"--set {shown}: expected a dotted key path like speculation.k")
    try:
        value = yamlio.load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    return parts, value


def apply_overrides(data: dict[str, Any], overrides: list[str] | dict[str, Any] | None
                    ) -> dict[str, Any]:
    """Set dotted keys in a raw scenario dict (before validation, so the same checks apply)."""
    data = copy.deepcopy(data)
    if not overrides:
        return data
    items = (overrides.items() if isinstance(overrides, dict)
             else (parse_override(o) for o in overrides))
    for key, value in items:
        parts = key.split(".") if isinstance(key, str) else key
        node = data
        for i, p in enumerate(parts[:-1]):
            nxt = node.get(p)
            if nxt is None or isinstance(nxt, str):
                # a catalog name replaced by a partial inline mapping makes no sense; start fresh
                nxt = {}
                node[p] = nxt
            elif not isinstance(nxt, dict):
                dotted = ".".join(map(str, parts))
                if not dotted.isprintable():
                    dotted = show(dotted)
                raise ScenarioError(f"--set {dotted}: {'.'.join(map(str, parts[: i + 1]))} is "
                                    f"not a mapping")
            node = nxt
        node[parts[-1]] = value
    return data


def read_text_file(path: Path, what: str = "a YAML scenario") -> str:
    """The text of a user's file, or a one-line ScenarioError saying why it cannot be read."""
    path = Path(path)
    try:
        st = path.stat()
    except (FileNotFoundError, NotADirectoryError, ValueError):  # ValueError: a NUL in the name
        raise ScenarioError(f"{path}: no such scenario file") from None
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        raise ScenarioError(f"{path}: is a folder, not a scenario file")
    if not stat.S_ISREG(st.st_mode):
        raise ScenarioError(f"{path}: not a regular file ({what} was expected)")
    if st.st_size > MAX_SCENARIO_BYTES:
        raise ScenarioError(f"{path}: {st.st_size / 1e6:,.0f} MB is too large for {what} (at "
                            f"most {MAX_SCENARIO_BYTES // 1024**2} MB)")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ScenarioError(f"{path}: not a UTF-8 text file ({what} was expected)") from None


def read_yaml(path: Path) -> dict[str, Any]:
    """A scenario file's top-level mapping (the project loader: ``1e3`` is a number)."""
    path = Path(path)
    text = read_text_file(path)
    try:
        data = yamlio.load(text)
    except RecursionError:
        raise ScenarioError(f"{path}: not valid YAML (nested too deeply)") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ScenarioError(f"{path}{where}: not valid YAML ({problem})") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: expected a mapping of scenario keys at the top level")
    return data
