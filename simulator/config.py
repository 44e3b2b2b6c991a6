"""Scenario files: load, apply ``--set`` overrides, validate.

Validation is strict: unknown keys are errors (a typo must not silently fall back to a
default), types and ranges are checked, and every message names the key path. The
``workload`` section is validated by ``traces``; catalog references by ``cost_models``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

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


SPEC_METHODS = ("none", "draft_model", "eagle3", "mtp", "ngram", "pard", "dflash")

SCHEMA: dict[str, Any] = {
    "name": Field("str", "scenario"),
    "description": Field("str", ""),
    "seed": Field("int", 0, lo=0),
    "hardware": {
        "accelerator": Field("ref", "H100-SXM", help="catalog name or inline mapping"),
        "count": Field("int", 1, lo=1, help="devices in the fleet"),
        "tensor_parallel": Field("int", 1, lo=1, help="devices per worker"),
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
            "ratio": Field("float", None, lo=0.0, nullable=True,
                           help="draft time per drafted token / one target decode step"),
            "seconds_per_token": Field("float", None, lo=0.0, nullable=True),
        },
        "acceptance": Field("mapping", None, nullable=True),
        "ngram": {
            "match_rate": Field("float", 1.0, lo=0.0, hi=1.0,
                                help="share of steps where the lookup finds a match"),
            "cpu_s_per_step": Field("float", 20e-6, lo=0.0,
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
        "price_usd_per_hour": Field("float", None, lo=0.0, nullable=True,
                                    help="per device; overrides the catalog's dated default"),
        "power_idle_w": Field("float", None, lo=0.0, nullable=True),
        "power_max_w": Field("float", None, lo=0.0, nullable=True),
    },
    "calibration": Field("str", None, nullable=True),
    "simulation": {
        "horizon_s": Field("float", None, lo=0.0, exclusive_lo=True, nullable=True,
                           help="stop here; unfinished requests are counted in flight"),
        "record_iterations": Field("bool", True),
        "progress": Field("bool", True),
        "fast_path": Field("bool", True, help="advance all-decode batches many steps at once"),
    },
}


def _check_field(f: Field, value: Any, path: str) -> Any:
    if value is None:
        if f.nullable or f.kind in ("any",):
            return None
        raise ScenarioError(f"{path}: expected a value, got null")
    kind = f.kind
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ScenarioError(f"{path}: expected an integer, got {value!r}")
    elif kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ScenarioError(f"{path}: expected a number, got {value!r}")
        value = float(value)
    elif kind == "bool":
        if not isinstance(value, bool):
            raise ScenarioError(f"{path}: expected true or false, got {value!r}")
    elif kind == "str":
        if not isinstance(value, str):
            raise ScenarioError(f"{path}: expected a string, got {value!r}")
    elif kind == "choice":
        if value not in f.choices:
            raise ScenarioError(f"{path}: expected one of {', '.join(f.choices)}, got {value!r}")
    elif kind == "ref":
        if not isinstance(value, str | dict):
            raise ScenarioError(f"{path}: expected a catalog name or an inline mapping, got "
                                f"{value!r}")
    elif kind == "mapping":
        if not isinstance(value, dict):
            raise ScenarioError(f"{path}: expected a mapping, got {value!r}")
    if kind in ("int", "float"):
        if f.lo is not None and (value < f.lo or (f.exclusive_lo and value == f.lo)):
            word = "greater than" if f.exclusive_lo else "at least"
            raise ScenarioError(f"{path}: expected a number {word} {f.lo:g}, got {value!r}")
        if f.hi is not None and value > f.hi:
            raise ScenarioError(f"{path}: expected a number at most {f.hi:g}, got {value!r}")
    return value


def validate(data: Any, schema: dict[str, Any] = SCHEMA, prefix: str = "") -> dict[str, Any]:
    """A copy of ``data`` with defaults filled in; raises on unknown keys or bad values."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ScenarioError(f"{prefix or 'scenario'}: expected a mapping, got {data!r}")
    unknown = sorted(set(data) - set(schema), key=str)
    if unknown:
        raise ScenarioError(f"{prefix}{unknown[0]}: unknown key (expected one of: "
                            f"{', '.join(schema)})")
    out: dict[str, Any] = {}
    for key, node in schema.items():
        path = f"{prefix}{key}"
        if isinstance(node, dict):
            out[key] = validate(data.get(key), node, f"{path}.")
        else:
            out[key] = _check_field(node, data.get(key, copy.deepcopy(node.default)), path)
    return out


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (["a", "b", "c"], YAML-parsed value)."""
    if "=" not in text:
        raise ScenarioError(f"--set {text}: expected key.path=value")
    key, raw = text.split("=", 1)
    parts = [p for p in key.strip().split(".")]
    if not all(parts):
        raise ScenarioError(f"--set {text}: expected a dotted key path like speculation.k")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
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
                raise ScenarioError(f"--set {'.'.join(parts)}: {'.'.join(parts[: i + 1])} is "
                                    f"not a mapping")
            node = nxt
        node[parts[-1]] = value
    return data


def read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ScenarioError(f"{path}: no such scenario file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ScenarioError(f"{path}{where}: not valid YAML ({problem})") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: expected a mapping of scenario keys at the top level")
    return data
