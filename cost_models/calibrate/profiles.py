"""Fit a GPU's calibration profile to measured per-operator tables (Vidur's format).

Three kinds of table, all CUDA kernel times in milliseconds (median of repeats):

- ``compute/<chip>/<org>/<model>/mlp.csv``: the kernels of ONE transformer layer (QKV,
  rope, O, norms, gated MLP up / act / down, residual add, embedding) against
  ``num_tokens`` and ``num_tensor_parallel_workers``, with the model's shape columns;
- ``network/<chip>_<topology>/all_reduce.csv``: NCCL all-reduce against message ``size``
  (bytes) and ``num_workers``;
- ``attention_<chip>*/attention.csv``: attention kernels, prefill (``prefill_chunk_size``
  new tokens over ``kv_cache_size`` cached) and decode (``batch_size`` sequences of
  ``kv_cache_size``), against TP.

Predictions are ``ForwardCostModel.group_times`` of a one-layer model built from the shape
columns (vocabulary 1, so the LM head's bytes are a few kB, below a nanosecond), priced
with the parameters being fitted: the same formulas the simulator prices passes with, per
op group (the cost model prices groups, not single kernels, so groups are what is
compared):

- linear (QKV + O + up + down): eta_compute, matmul_half_tokens, eta_memory;
- elementwise (two norms, two residual adds, rope, activation): eta_elementwise;
- attention (prefill and decode kernels): eta_attn_prefill, eta_attn_decode;
- all-reduce (each measured message): allreduce_latency_s, allreduce_bw_eff (rows whose
  workers sit in one node); where the table also has rows whose workers span nodes
  (``devices_per_node`` below ``num_workers``), allreduce_nic_latency_s and
  allreduce_nic_bw_eff (``roofline.cross_node_allreduce``, the NVLink terms held);
- each group's kernel floor (the launch-and-tail time a kernel takes however small):
  ``per_layer_overhead_s`` is their sum over one layer's kernels (linear + elementwise +
  attention), because the cost model adds one floor per layer.

Residuals are relative errors, log(predicted / measured) by default (symmetric, so a noisy
row cannot drag the fit low), weighted so that every octave of ``num_tokens`` (1, 2-3, 4-7,
...) of every (model, TP) table counts the same (serving spends most passes at small
batches, while the tables sample large ones densely), minimised with
``scipy.optimize.least_squares`` from several starts (the roofline's max() makes the loss
piecewise). Each op group is fitted on its own rows (the groups share no parameter). Held-out errors (whole models, one TP degree, long attention contexts) say how
far the profile can be trusted; the written profile is refitted on all rows.

Not in the tables, so not fitted here: the embedding lookup per pass (its measured floor
becomes ``fixed_overhead_s``; the engine's CPU work per pass is the ``engine_*`` part,
fitted from real serving runs), the LM head, and the engine / speculation parameters.
"""

from __future__ import annotations

import datetime as _dt
import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from scipy.optimize import OptimizeResult, least_squares

from specsim import values

from ..calibration import Calibration
from ..catalog import (
    HardwareSpec,
    ModelSpec,
    Precision,
    get_hardware,
    get_precision,
    hardware_catalog,
    model_from_dict,
)
from ..errors import CatalogError
from ..roofline import ForwardCostModel, attention_area

# ------------------------------------------------------------------ table layout

LINEAR_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
# Elementwise kernels of one layer and how often each runs (the table times one residual add;
# a layer has two, as the cost model counts).
ELEMENTWISE_OPS = {"input_layernorm": 1, "post_attention_layernorm": 1, "attn_rope": 1,
                   "mlp_act": 1, "add": 2}
EMBEDDING_OP = "emb"
COMPUTE_SHAPE = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "use_gated_mlp")
COMPUTE_KEYS = ("num_tokens", "num_tensor_parallel_workers")
NETWORK_COLUMNS = ("time_stats.all_reduce.median", "num_workers", "size")
ATTENTION_COLUMNS = ("is_prefill", "batch_size", "prefill_chunk_size", "kv_cache_size",
                     "num_tensor_parallel_workers", "n_q_head", "n_kv_head", "n_embd")
ATTN_PREFILL = "time_stats.attn_prefill.median"
ATTN_DECODE = "time_stats.attn_decode.median"

# Table folder names of the catalog's chips (other catalog chips: the name's first part,
# lower case, e.g. H200-SXM -> h200).
TABLE_KEYS = {"H100-SXM": "h100", "A100-SXM-80GB": "a100"}

# The cost model's parameters this fit sets (the engine_* and spec_* ones are fitted to
# real serving runs elsewhere and are left out of these profiles).
FITTED = ("eta_compute", "matmul_half_tokens", "eta_memory", "eta_elementwise",
          "per_layer_overhead_s", "fixed_overhead_s", "allreduce_latency_s",
          "allreduce_bw_eff", "eta_attn_prefill", "eta_attn_decode",
          "allreduce_nic_latency_s", "allreduce_nic_bw_eff")
# fitted only where the network table has rows whose workers span nodes
CROSS_NODE = ("allreduce_nic_latency_s", "allreduce_nic_bw_eff")
# Cross-node terms a chip whose tables have no rows across nodes takes from another chip's
# fitted profile (labelled TRANSFERRED): chip -> (donor chip, terms). Vidur measured no
# H100 cross-node all-reduce; its A100 table has such rows (the NIC share of H100 is a cited
# measurement instead, kept by benchmarks/engine_fit.py).
NIC_TRANSFERS = {"H100-SXM": ("A100-SXM-80GB", ("allreduce_nic_latency_s",))}

# Attention rows over a longer context (cached + new tokens) are held out as an extrapolation
# (``attention_holdout``), also by the paged-KV decode check (``decode_context_terms``).
LONG_CONTEXT = 2048.0
DEFAULT_HOLDOUT = None  # every model in turn, and the largest TP degree, where the tables allow
VIDUR_SOURCE = ("microsoft/vidur profiling data (MIT licence): data/profiling compute, "
                "network and attention tables, read from ../shared/data/gpu_profiles/vidur "
                "(see shared/data/README.md, section gpu_profiles)")


@functools.cache
def _precision() -> Precision:
    """The tables' dtype: 16-bit weights, activations and KV (fp16 there, priced as bf16)."""
    return get_precision(None, "profile tables")


# ------------------------------------------------------------------ hardware names


def table_key(hardware_name: str) -> str:
    """The table folder name of a catalog chip (``H100-SXM`` -> ``h100``)."""
    return TABLE_KEYS.get(hardware_name, re.split(r"[-_ ]", hardware_name)[0].lower())


def resolve_hardware(name: str) -> tuple[str, str]:
    """(catalog name, table key) for a catalog name or a table key (``h100``, ``H100-SXM``)."""
    cat = hardware_catalog()
    if name in cat:
        return name, table_key(name)
    key = name.lower()
    matches = [hw for hw in cat if table_key(hw) == key]
    if key in TABLE_KEYS.values():
        matches = [hw for hw, k in TABLE_KEYS.items() if k == key]
    if len(matches) == 1:
        return matches[0], key
    known = ", ".join(f"{k} ({hw})" for hw, k in TABLE_KEYS.items())
    if matches:
        raise CatalogError(f"--hardware {name!r}: ambiguous (catalog entries "
                           f"{', '.join(matches)}); give the catalog name")
    raise CatalogError(f"--hardware {name!r}: not a catalog accelerator or table name "
                       f"(tables: {known}; catalog: {', '.join(sorted(cat))})")


def transferred_cross_node(hardware: str, donor: dict[str, Any]
                           ) -> tuple[dict[str, float], dict[str, str]]:
    """The cross-node terms ``hardware`` takes from its donor (``NIC_TRANSFERS``), with
    each one's source label; ``donor``: the donor's bundled profile mapping, so the value is
    written in one place (the donor's fit) and copied by this step only."""
    if hardware not in NIC_TRANSFERS:
        return {}, {}
    name, terms = NIC_TRANSFERS[hardware]
    if donor.get("hardware") != name:
        raise CatalogError(f"{hardware}: cross-node terms come from {name}'s profile, got "
                           f"{donor.get('hardware')!r}'s")
    vals = {k: donor["fitted"][k] for k in terms}
    own = table_key(hardware).upper()
    return vals, {k: (f"TRANSFERRED from {name} (its all-reduce table's cross-node rows, "
                      f"fit_quality.cross_node_allreduce there: {v * 1e6:.1f} us); no {own} "
                      "cross-node table") for k, v in vals.items()}


# ------------------------------------------------------------------ loading


def _read_csv(path: Path) -> pd.DataFrame:
    from specsim import safe_read

    try:  # under the caps (size, line, gzip); distinct column names (pandas would rename)
        df = safe_read.read_csv(path, "a CSV table")
    except pd.errors.EmptyDataError:
        raise CatalogError(f"{path}: empty file (expected a CSV table with a header row)") from None
    except UnicodeDecodeError:
        raise CatalogError(f"{path}: not a UTF-8 text file (expected a CSV table)") from None
    except pd.errors.ParserError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "parse error"
        raise CatalogError(f"{path}: not a valid CSV table ({first})") from None
    except OSError as exc:
        raise CatalogError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if df.empty:
        raise CatalogError(f"{path}: no data rows (expected a header and at least one row)")
    return df


def _require(df: pd.DataFrame, cols: Sequence[str], path: Path, what: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise CatalogError(f"{path}: missing column {missing[0]!r} (a {what} table needs "
                           f"{', '.join(cols)})")


def _numbers(df: pd.DataFrame, col: str, path: Path, rows: pd.Series | None = None,
             positive: bool = False, nonneg: bool = False) -> np.ndarray:
    """Column ``col`` as floats by the shared rule (``specsim.values.column``); a bad cell is
    a one-line error naming its CSV line (``df`` keeps read_csv's row numbers as its index)."""
    sub = df[col] if rows is None else df.loc[rows, col]
    try:
        return values.column(sub, text_ok=True, lo=0 if positive or nonneg else None,
                             exclusive_lo=positive)
    except values.ValueRuleError as exc:
        idx = sub.index[exc.row]
        raise CatalogError(f"{path}: line {int(idx) + 2}, column {col!r}: {exc}") from None


def _bools(df: pd.DataFrame, col: str, path: Path) -> np.ndarray:
    truth = {"true": True, "1": True, "1.0": True, "false": False, "0": False, "0.0": False}
    out = []
    for i, v in enumerate(df[col].tolist()):
        key = str(v).strip().lower()
        if key not in truth:
            raise CatalogError(f"{path}: line {i + 2}, column {col!r}: expected True or False, "
                               f"got {str(v)!r}")
        out.append(truth[key])
    return np.array(out, dtype=bool)


def load_compute_table(path: str | Path, model: str | None = None) -> pd.DataFrame:
    """One layer's kernel times (seconds, median of repeats; duplicate rows merged by median).

    Columns: model, tp, tokens, the shape (n_head, n_kv_head, n_embd, n_expanded_embd), one
    per kernel, and ``linear`` / ``elementwise`` / ``layer`` (their sums as the cost model
    groups them: two residual adds per layer; the embedding lookup is not in ``layer``).
    """
    path = Path(path)
    df = _read_csv(path)
    op_cols = [f"time_stats.{op}.median" for op in (*LINEAR_OPS, *ELEMENTWISE_OPS)]
    emb_col = f"time_stats.{EMBEDDING_OP}.median"
    _require(df, [*COMPUTE_KEYS, *COMPUTE_SHAPE, *op_cols], path, "compute (mlp.csv)")
    gated = _bools(df, "use_gated_mlp", path)
    if not gated.all():
        line = int(np.argmin(gated)) + 2
        raise CatalogError(f"{path}: line {line}, column 'use_gated_mlp': the cost model prices "
                           "gated (SwiGLU) MLPs only, got False")
    out = pd.DataFrame({
        "tokens": _numbers(df, "num_tokens", path, positive=True),
        "tp": _numbers(df, "num_tensor_parallel_workers", path, positive=True),
    })
    for c in COMPUTE_SHAPE[:4]:
        out[c] = _numbers(df, c, path, positive=True)
    for op, col in zip((*LINEAR_OPS, *ELEMENTWISE_OPS), op_cols, strict=True):
        out[op] = _numbers(df, col, path) * 1e-3
    # The embedding lookup is optional (only fixed_overhead_s reads it): blanks are skipped.
    out[EMBEDDING_OP] = (pd.to_numeric(df[emb_col], errors="coerce").to_numpy(float) * 1e-3
                         if emb_col in df.columns else np.nan)
    shapes = out[list(COMPUTE_SHAPE[:4])].drop_duplicates()
    if len(shapes) > 1:
        raise CatalogError(f"{path}: expected one model shape per file, found {len(shapes)} "
                           "(n_head, n_kv_head, n_embd, n_expanded_embd differ between rows)")
    for c in COMPUTE_SHAPE[:4]:
        v = float(out[c].iloc[0])
        if v != int(v):
            raise CatalogError(f"{path}: column {c!r}: expected a whole number, got {v}")
    h, nh = int(out["n_embd"].iloc[0]), int(out["n_head"].iloc[0])
    if h % nh or nh % int(out["n_kv_head"].iloc[0]):
        raise CatalogError(f"{path}: n_embd ({h}) must divide by n_head ({nh}) and n_head by "
                           f"n_kv_head ({int(out['n_kv_head'].iloc[0])})")
    out = out.groupby(["tp", "tokens"], as_index=False).median()
    out["linear"] = out[list(LINEAR_OPS)].sum(axis=1)
    out["elementwise"] = sum(out[op] * n for op, n in ELEMENTWISE_OPS.items())
    out["layer"] = out["linear"] + out["elementwise"]
    out.insert(0, "model", model or path.parent.name)
    return out


def _allreduce_rows(path: Path) -> pd.DataFrame:
    """The all-reduce rows of a network table as read (one reader for the single-node and
    the cross-node loaders): workers, size (bytes), time_s (seconds) and, where the table
    has ``devices_per_node``, per_node."""
    df = _read_csv(path)
    _require(df, NETWORK_COLUMNS, path, "network (all_reduce.csv)")
    if "collective" in df.columns:
        df = df[df["collective"].astype(str) == "all_reduce"]
        if df.empty:
            raise CatalogError(f"{path}: no all_reduce rows (column 'collective')")
    out = pd.DataFrame({
        "workers": _numbers(df, "num_workers", path, positive=True),
        "size": _numbers(df, "size", path, positive=True),
        "time_s": _numbers(df, "time_stats.all_reduce.median", path, positive=True) * 1e-3,
    }, index=df.index)
    if "devices_per_node" in df.columns:
        out["per_node"] = _numbers(df, "devices_per_node", path, positive=True)
    return out


def load_allreduce_table(path: str | Path, single_node: bool = True) -> pd.DataFrame:
    """All-reduce times (seconds) per (workers, size in bytes); duplicates merged by median.

    ``single_node``: keep rows whose workers all sit in one node (``devices_per_node`` equal
    to ``num_workers``) where the table says, as tensor parallelism runs.
    """
    path = Path(path)
    out = _allreduce_rows(path)
    if single_node and "per_node" in out.columns:
        out = out[out["per_node"] == out["workers"]]
    out = out.drop(columns="per_node", errors="ignore")
    out = out[out["workers"] > 1]
    if out.empty:
        raise CatalogError(f"{path}: no rows with 2 or more workers in one node")
    return out.groupby(["workers", "size"], as_index=False).median()


def load_cross_node_allreduce(path: str | Path) -> pd.DataFrame | None:
    """All-reduce rows whose workers span nodes (``devices_per_node`` below
    ``num_workers``): seconds per (workers, devices per node, size); None where the table has
    no such rows (or no ``devices_per_node`` column)."""
    out = _allreduce_rows(Path(path))
    if "per_node" not in out.columns:
        return None
    out = out[out["per_node"] < out["workers"]]
    if out.empty:
        return None
    return out.groupby(["workers", "per_node", "size"], as_index=False).median()


def load_attention_table(path: str | Path) -> pd.DataFrame:
    """Attention kernel times (seconds) with the cost model's aggregates per row.

    Columns: kind (prefill / decode), tp, batch, q (new tokens per sequence), kv (cached),
    tokens, qc (causal area), ctx, time_s, n_embd, n_q_head, n_kv_head.
    """
    path = Path(path)
    df = _read_csv(path)
    _require(df, ATTENTION_COLUMNS, path, "attention (attention.csv)")
    prefill = _bools(df, "is_prefill", path)
    need = [ATTN_PREFILL] if prefill.any() else []
    need += [ATTN_DECODE] if (~prefill).any() else []
    _require(df, need, path, "attention (attention.csv)")
    pre = pd.Series(prefill, index=df.index)
    nonneg = ("kv_cache_size", "prefill_chunk_size")
    nums = {c: _numbers(df, c, path, positive=c not in nonneg, nonneg=c in nonneg)
            for c in ATTENTION_COLUMNS[1:]}
    bad = (nums["n_embd"] % nums["n_q_head"] != 0) | (nums["n_q_head"] % nums["n_kv_head"] != 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise CatalogError(f"{path}: line {i + 2}: n_embd ({nums['n_embd'][i]:g}) must divide by "
                           f"n_q_head ({nums['n_q_head'][i]:g}) and n_q_head by n_kv_head "
                           f"({nums['n_kv_head'][i]:g})")
    t = np.full(len(df), np.nan)
    if prefill.any():
        t[prefill] = _numbers(df, ATTN_PREFILL, path, rows=pre, positive=True)
        if (nums["prefill_chunk_size"][prefill] <= 0).any():
            i = int(np.flatnonzero(prefill & (nums["prefill_chunk_size"] <= 0))[0])
            raise CatalogError(f"{path}: line {i + 2}, column 'prefill_chunk_size': expected a "
                               "positive number on a prefill row")
    if (~prefill).any():
        t[~prefill] = _numbers(df, ATTN_DECODE, path, rows=~pre, positive=True)
    b, kv = nums["batch_size"], nums["kv_cache_size"]
    q = np.where(prefill, nums["prefill_chunk_size"], 1.0)
    out = pd.DataFrame({
        "kind": np.where(prefill, "prefill", "decode"), "tp": nums["num_tensor_parallel_workers"],
        "batch": b, "q": q, "kv": kv, "tokens": b * q, "qc": b * attention_area(q, kv),
        "ctx": b * kv, "time_s": t * 1e-3, "n_embd": nums["n_embd"],
        "n_q_head": nums["n_q_head"], "n_kv_head": nums["n_kv_head"]})
    keys = ["kind", "tp", "batch", "q", "kv", "n_embd", "n_q_head", "n_kv_head"]
    return out.groupby(keys, as_index=False).median()


# ------------------------------------------------------------------ finding tables


@dataclass
class Tables:
    """The tables of one chip found under a folder (paths; ``*_hw``: catalog names)."""

    root: Path
    hardware: str
    compute: list[tuple[str, Path]]  # (model name, mlp.csv)
    network: Path | None  # the switched (dgx) table, else the only one
    network_other: list[Path] = field(default_factory=list)  # e.g. pairwise NVLink
    attention: Path | None = None
    attention_hw: str | None = None  # chip the attention table was measured on

    def rel(self, p: Path) -> str:
        try:
            return str(p.relative_to(self.root))
        except ValueError:
            return str(p)


def _key_of_folder(name: str, keys: dict[str, str]) -> str | None:
    """The catalog chip a folder named ``<key>_...`` belongs to (longest key first)."""
    for key in sorted(keys, key=len, reverse=True):
        if name == key or name.startswith(key + "_"):
            return keys[key]
    return None


def find_tables(root: str | Path, hardware: str) -> Tables:
    """The compute, network and attention tables of ``hardware`` under ``root`` (a Vidur
    ``data/profiling`` folder or one holding it as ``vidur/``).

    Without an attention table of this chip, another chip's is used (its efficiencies are
    transferred as shares of this chip's own peak and bandwidth: labelled in the profile).
    """
    root = Path(root)
    if not root.is_dir():
        raise CatalogError(f"--from-profiles {root}: not a folder")
    if not (root / "compute").is_dir() and (root / "vidur" / "compute").is_dir():
        root = root / "vidur"
    name, key = resolve_hardware(hardware)
    cdir = root / "compute" / key
    compute = sorted((str(p.parent.relative_to(cdir)) if p.parent != cdir else key, p)
                     for p in cdir.rglob("mlp.csv")) if cdir.is_dir() else []
    if not compute:
        have = sorted(p.name for p in (root / "compute").iterdir() if p.is_dir()) \
            if (root / "compute").is_dir() else []
        raise CatalogError(f"{root}: no tables found for {name}: expected "
                           f"compute/{key}/<org>/<model>/mlp.csv"
                           + (f" (compute/ has: {', '.join(have)})" if have else
                              " (no compute/ folder)"))
    nets = sorted((root / "network").glob(f"{key}_*/all_reduce.csv")) \
        if (root / "network").is_dir() else []
    dgx = [p for p in nets if p.parent.name == f"{key}_dgx"]
    network = dgx[0] if dgx else (nets[0] if nets else None)
    others = [p for p in nets if p != network]
    keys = {table_key(hw): hw for hw in hardware_catalog()}
    keys.update({k: hw for hw, k in TABLE_KEYS.items()})
    attn = sorted(root.glob("attention*/attention.csv")) + sorted(
        root.glob("attention/*/attention.csv"))
    own, other = [], []
    for p in attn:
        folder = p.parent.name
        folder = folder[len("attention_"):] if folder.startswith("attention_") else folder
        hw = _key_of_folder(folder, keys)
        (own if hw == name else other).append((p, hw))
    pick = own[0] if own else next(((p, hw) for p, hw in other if hw), (None, None))
    return Tables(root=root, hardware=name, compute=compute, network=network,
                  network_other=others, attention=pick[0], attention_hw=pick[1])


# ------------------------------------------------------------------ predictions


def layer_model(n_embd: int, n_head: int, n_kv_head: int, n_expanded: int,
                name: str = "profiled-layer") -> ModelSpec:
    """One transformer layer of the profiled shape, as a catalog ModelSpec.

    Vocabulary 1: the LM head (not in the tables) then weighs n_embd * 2 bytes, below a
    nanosecond of streaming; nothing else of the pass is priced.
    """
    return model_from_dict(name, {
        "n_layers": 1, "hidden_size": int(n_embd), "n_heads": int(n_head),
        "n_kv_heads": int(n_kv_head), "head_dim": int(n_embd) // int(n_head),
        "intermediate_size": int(max(n_expanded, 1)), "vocab_size": 1,
        "source": "shape columns of a per-operator profile table"}, "profile table shape")


def calibration_from(values: dict[str, float], name: str = "profile-fit") -> Calibration:
    """A Calibration with ``values`` (missing ones: neutral, overheads zero)."""
    base = {"eta_compute": 0.8, "eta_memory": 0.8, "per_layer_overhead_s": 0.0,
            "fixed_overhead_s": 0.0}
    base.update({k: float(v) for k, v in values.items() if v is not None})
    return Calibration(name=name, calibrated=True, source="fit", **base)


@dataclass
class _Case:
    """Rows priced by one ForwardCostModel (one shape and TP degree)."""

    spec: ModelSpec
    tp: int
    rows: np.ndarray  # positions in the group's frame
    tokens: np.ndarray
    qc: np.ndarray
    ctx: np.ndarray
    per_node: int | None = None  # devices per node of a cross-node all-reduce (None: the chip's)


def _shape_keys(frame: pd.DataFrame) -> list[tuple[int, int, int, int, int]]:
    """(n_embd, n_head, n_kv_head, n_expanded_embd, tp) per row (compute or attention)."""
    heads = "n_head" if "n_head" in frame.columns else "n_q_head"
    inter = (frame["n_expanded_embd"].to_numpy(int) if "n_expanded_embd" in frame.columns
             else np.ones(len(frame), dtype=int))
    return list(zip(frame["n_embd"].to_numpy(int).tolist(), frame[heads].to_numpy(int).tolist(),
                    frame["n_kv_head"].to_numpy(int).tolist(), inter.tolist(),
                    frame["tp"].to_numpy(int).tolist(), strict=True))


def _cases(frame: pd.DataFrame, attention: bool = False) -> list[_Case]:
    """Split rows by (shape, tp): one ForwardCostModel each."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, key in enumerate(_shape_keys(frame)):
        groups.setdefault(key, []).append(i)
    out = []
    for key, rows in groups.items():
        idx = np.array(rows)
        sub = frame.iloc[idx]
        zeros = np.zeros(len(idx))
        out.append(_Case(layer_model(*key[:4]), key[4], idx, sub["tokens"].to_numpy(float),
                         sub["qc"].to_numpy(float) if attention else zeros,
                         sub["ctx"].to_numpy(float) if attention else zeros))
    return out


def _allreduce_cases(frame: pd.DataFrame, across_nodes: bool = False) -> list[_Case]:
    """A one-wide layer per worker count: a message of ``size`` bytes is size / 2 tokens of
    16-bit activations (and a layer runs two all-reduces). ``across_nodes``: one per (workers,
    devices per node) of a cross-node table (``load_cross_node_allreduce``), priced with the
    chip's ``devices_per_node`` set to the row's (``roofline.cross_node_allreduce``)."""
    size = frame["size"].to_numpy(float)
    keys = ["workers", "per_node"] if across_nodes else "workers"
    out = []
    for key, idx in frame.groupby(keys).indices.items():
        w, n = key if across_nodes else (key, None)
        out.append(_Case(layer_model(1, 1, 1, 1), int(w), idx, size[idx] / 2.0,
                         np.zeros(len(idx)), np.zeros(len(idx)),
                         per_node=None if n is None else int(n)))
    return out


def _group(cases: list[_Case], n: int, hw: HardwareSpec, cal: Calibration, group: str,
           logits: float | None = 0.0) -> np.ndarray:
    """Seconds of op group ``group`` per row, from ForwardCostModel.group_times."""
    out = np.empty(n)
    prec = _precision()
    for c in cases:
        case_hw = hw if c.per_node is None else replace(hw, devices_per_node=c.per_node)
        cm = ForwardCostModel(c.spec, case_hw, c.tp, prec, cal)
        lg = None if logits is None else np.full(len(c.tokens), logits)
        out[c.rows] = cm.group_times(c.tokens, c.qc, c.ctx, lg)[group]
    return out


# Each group's parameters: name, optimiser scale, lower, upper, starting points.
_SPECS: dict[str, list[tuple[str, float, float, float, tuple[float, ...]]]] = {
    "linear": [("eta_compute", 1.0, 0.02, 1.5, (0.5, 0.8)),
               ("matmul_half_tokens", 100.0, 0.0, 8192.0, (20.0, 200.0)),
               ("eta_memory", 1.0, 0.02, 1.5, (0.6, 0.9)),
               ("floor_linear_s", 1e-5, 0.0, 5e-4, (5e-6,))],
    "elementwise": [("eta_elementwise", 1.0, 0.01, 1.5, (0.3, 0.7)),
                    ("floor_elementwise_s", 1e-5, 0.0, 5e-4, (2e-6, 2e-5))],
    "attention": [("eta_attn_prefill", 1.0, 0.01, 1.5, (0.2, 0.6)),
                  ("eta_attn_decode", 1.0, 0.01, 1.5, (0.4, 0.8)),
                  ("floor_attention_s", 1e-5, 0.0, 5e-4, (5e-6, 2e-5))],
    "allreduce": [("allreduce_latency_s", 1e-5, 0.0, 1e-3, (5e-6, 3e-5)),
                  ("allreduce_bw_eff", 1.0, 0.01, 1.5, (0.3, 0.8))],
    "allreduce_nic": [("allreduce_nic_latency_s", 1e-5, 0.0, 1e-3, (1e-5, 5e-5)),
                      ("allreduce_nic_bw_eff", 1.0, 0.001, 1.5, (0.1, 0.6))],
}
_FLOORS = {"linear": "floor_linear_s", "elementwise": "floor_elementwise_s",
           "attention": "floor_attention_s"}


def predict(group: str, frame: pd.DataFrame, hw: HardwareSpec, values: dict[str, float],
            cases: list[_Case] | None = None) -> np.ndarray:
    """Predicted seconds per row of ``frame`` for one op group under ``values``.

    linear / elementwise / layer: one layer's kernels of a compute table (each group plus
    its kernel floor); attention: the kernel of an attention table row (plus its floor);
    allreduce: one all-reduce of a network table row. ``values`` maps parameter names
    (``FITTED`` and the floors ``floor_*_s``) to numbers.
    """
    if group == "layer":
        return (predict("linear", frame, hw, values, cases)
                + predict("elementwise", frame, hw, values, cases))
    cal = calibration_from({k: v for k, v in values.items() if not k.startswith("floor_")})
    if group in ("linear", "elementwise"):
        cases = cases or _cases(frame)
        return _group(cases, len(frame), hw, cal, group) + values.get(_FLOORS[group], 0.0)
    if group == "attention":
        cases = cases or _cases(frame, attention=True)
        return _group(cases, len(frame), hw, cal, group, logits=None) + values.get(
            _FLOORS[group], 0.0)
    if group in ("allreduce", "allreduce_nic"):
        cases = cases or _allreduce_cases(frame, across_nodes=group == "allreduce_nic")
        return _group(cases, len(frame), hw, cal, "allreduce") / 2.0
    raise ValueError(f"unknown op group {group!r}")


def _measured(group: str, frame: pd.DataFrame) -> np.ndarray:
    col = {"linear": "linear", "elementwise": "elementwise", "layer": "layer",
           "attention": "time_s", "allreduce": "time_s", "allreduce_nic": "time_s"}[group]
    return frame[col].to_numpy(float)


def _octave_weights(frame: pd.DataFrame, size_col: str, by: Sequence[str]) -> np.ndarray:
    """Row weights giving every octave of ``size_col`` within each ``by`` table the same
    total weight (the tables sample large sizes densely; serving runs many small passes)."""
    octave = np.floor(np.log2(np.maximum(frame[size_col].to_numpy(float), 1.0)))
    keys = [frame[c].to_numpy() for c in by] + [octave]
    counts = pd.Series(1, index=pd.MultiIndex.from_arrays(keys)).groupby(level=list(
        range(len(keys)))).transform("size").to_numpy(float)
    w = 1.0 / counts
    return w * len(w) / w.sum()


@dataclass
class GroupFit:
    values: dict[str, float]
    cost: float
    rows: int


RESIDUALS = ("log", "relative")


def fit_group(group: str, frame: pd.DataFrame, hw: HardwareSpec,
              fixed: dict[str, float] | None = None, residual: str = "log") -> GroupFit:
    """Least-squares fit of one op group's parameters to ``frame`` from every combination
    of the starting points.

    Residuals are relative errors with octave weights: ``log`` (log(predicted / measured),
    symmetric: a noisy row cannot pull the fit low, as under-prediction is bounded at -100%
    in plain relative error and over-prediction is not) or ``relative`` (predicted /
    measured - 1).
    """
    if residual not in RESIDUALS:
        raise CatalogError(f"residual {residual!r}: expected one of {', '.join(RESIDUALS)}")
    spec = _SPECS[group]
    fixed = dict(fixed or {})
    if frame.empty:
        raise CatalogError(f"no {group} rows to fit")
    meas = _measured(group, frame)
    if group == "allreduce":
        w = _octave_weights(frame, "size", ["workers"])
        cases = _allreduce_cases(frame)
    elif group == "allreduce_nic":
        w = _octave_weights(frame, "size", ["workers", "per_node"])
        cases = _allreduce_cases(frame, across_nodes=True)
    elif group == "attention":
        w = _attention_weights(frame)
        cases = _cases(frame, attention=True)
    else:
        w = _octave_weights(frame, "tokens", ["model", "tp"])
        cases = _cases(frame)
    sw = np.sqrt(w)
    names = [s[0] for s in spec]
    scale = np.array([s[1] for s in spec])
    lo = np.array([s[2] for s in spec]) / scale
    hi = np.array([s[3] for s in spec]) / scale

    def resid(x: np.ndarray) -> np.ndarray:
        vals = {**fixed, **dict(zip(names, x * scale, strict=True))}
        return _residuals(predict(group, frame, hw, vals, cases), meas, sw, residual)

    best = _best_fit(resid, [np.array(start) / scale for start in _starts(spec)], lo, hi)
    vals = dict(zip(names, (float(v) for v in best.x * scale), strict=True))
    return GroupFit(vals, float(best.cost), len(frame))


def _attention_weights(frame: pd.DataFrame) -> np.ndarray:
    """Attention rows' weights: half by octave of new tokens, half by octave of context, per
    (kind, TP) table (both axes are sampled unevenly and both set the kernel's time)."""
    return (_octave_weights(frame, "tokens", ["kind", "tp"]) * 0.5
            + _octave_weights(frame, "ctx", ["kind", "tp"]) * 0.5)


def _residuals(pred: np.ndarray, meas: np.ndarray, sw: np.ndarray,
               residual: str = "log") -> np.ndarray:
    """Weighted relative errors per row (``sw``: square roots of the row weights), as
    ``fit_group`` documents them: every fit here minimises the same loss."""
    ratio = pred / meas
    return sw * (np.log(ratio) if residual == "log" else ratio - 1.0)


def _best_fit(resid: Callable[[np.ndarray], np.ndarray], starts: Sequence[Sequence[float]],
              lo: Sequence[float], hi: Sequence[float]) -> OptimizeResult:
    """``least_squares`` (trf, bounded) from each start (clipped into the bounds); the
    lowest cost wins, since the roofline's max() makes the loss piecewise."""
    best = None
    for start in starts:
        x0 = np.clip(np.asarray(start, dtype=float), lo, hi)
        r = least_squares(resid, x0, bounds=(lo, hi), method="trf", x_scale=1.0)
        if best is None or r.cost < best.cost:
            best = r
    return best


def _starts(spec: list[tuple[str, float, float, float, tuple[float, ...]]]) -> list[list[float]]:
    starts: list[list[float]] = [[]]
    for s in spec:
        starts = [a + [v] for a in starts for v in s[4]]
    return starts


def ape_stats(pred: np.ndarray, meas: np.ndarray) -> dict[str, float]:
    """Median / mean / 90th percentile / max absolute percentage error and row count."""
    ape = np.abs(np.asarray(pred) / np.asarray(meas) - 1.0) * 100.0
    if ape.size == 0:
        return {"rows": 0}
    return {"rows": int(ape.size), "median_ape_pct": round(float(np.median(ape)), 2),
            "mean_ape_pct": round(float(np.mean(ape)), 2),
            "p90_ape_pct": round(float(np.percentile(ape, 90)), 2),
            "max_ape_pct": round(float(np.max(ape)), 2)}


# ------------------------------------------------------------------ the whole fit


@dataclass
class ProfileFit:
    """A chip's fitted parameters, their errors, and the profile to write."""

    hardware: str
    values: dict[str, float]  # FITTED parameters (SI units)
    floors: dict[str, float]  # per-group kernel floors (s) that sum to per_layer_overhead_s
    quality: dict[str, Any]
    notes: list[str]
    tables: list[str]
    source: str
    name: str

    @property
    def calibration(self) -> Calibration:
        return calibration_from(self.values, self.name)

    def profile(self) -> dict[str, Any]:
        """The YAML mapping (``fitted:`` holds this fit's parameters only)."""
        return {
            "name": self.name, "hardware": self.hardware, "source": self.source,
            "date": _dt.date.today().isoformat(),
            "fitted": {k: _sig(self.values[k]) for k in FITTED if k in self.values},
            "fit_quality": _plain(self.quality),
            "kernel_floors_s": {k: _sig(v) for k, v in self.floors.items()},
            "tables": list(self.tables),
            "notes": list(self.notes),
        }


def _plain(obj: Any) -> Any:
    """Numpy scalars to Python ones, recursively (for yaml.safe_dump)."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    if isinstance(obj, np.bool_ | bool):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    return obj


def _sig(x: float, digits: int = 6) -> float:
    return float(f"{x:.{digits}g}")


def _holdout_masks(spec: str, compute: pd.DataFrame, network: pd.DataFrame | None
                   ) -> list[tuple[str, np.ndarray, np.ndarray | None]]:
    """(label, compute rows held out, network rows held out) per fold of one holdout spec."""
    if spec == "each-model":
        return [(f"model {m}", (compute["model"] == m).to_numpy(), None)
                for m in compute["model"].unique()]
    kind, _, arg = spec.partition(":")
    if kind == "model" and arg:
        names = compute["model"].unique()
        hit = [m for m in names if m.lower() == arg.lower()] or \
            [m for m in names if arg.lower() in m.lower()]
        if len(hit) != 1:
            raise CatalogError(f"holdout {spec!r}: expected one model matching {arg!r} (tables: "
                               f"{', '.join(names)})")
        return [(f"model {hit[0]}", (compute["model"] == hit[0]).to_numpy(), None)]
    if kind == "tp" and arg.isdigit():
        tp = int(arg)
        if not (compute["tp"] == tp).any():
            raise CatalogError(f"holdout {spec!r}: no rows with TP {tp} (tables have "
                               f"{', '.join(str(int(t)) for t in sorted(compute['tp'].unique()))})")
        net = None if network is None else (network["workers"] == tp).to_numpy()
        return [(f"TP {tp}", (compute["tp"] == tp).to_numpy(), net)]
    raise CatalogError(f"holdout {spec!r}: expected 'each-model', 'model:NAME' or 'tp:N'")


def _datasheet(hw: HardwareSpec, v: dict[str, float], compute: pd.DataFrame,
               attn: pd.DataFrame | None, attn_hw: HardwareSpec | None,
               network: pd.DataFrame | None) -> dict[str, Any]:
    """Fitted rates next to the catalog's peaks, and the best rate any measured row reached."""
    peak, bw, link = hw.peak("bf16")[0], hw.hbm_bw, hw.link_bw
    prec = _precision()
    best_flops = best_wbytes = 0.0
    for c in _cases(compute):
        m, tp, sub = c.spec, c.tp, compute.iloc[c.rows]
        params = m.active_params_per_token - m.lm_head_params
        fl = 2.0 * params / tp * sub["tokens"].to_numpy(float) / sub["linear"].to_numpy(float)
        wb = params * prec.weights.bytes_per_element / tp / sub["linear"].to_numpy(float)
        best_flops, best_wbytes = max(best_flops, fl.max()), max(best_wbytes, wb.max())
    out: dict[str, Any] = {
        "linear_matmul": {"fitted_tflops": round(v["eta_compute"] * peak / 1e12, 1),
                          "datasheet_tflops": round(peak / 1e12, 1),
                          "share": round(v["eta_compute"], 3),
                          "best_measured_tflops": round(float(best_flops) / 1e12, 1)},
        "weight_streaming": {"fitted_gb_s": round(v["eta_memory"] * bw / 1e9, 1),
                             "datasheet_gb_s": round(bw / 1e9, 1),
                             "share": round(v["eta_memory"], 3),
                             "best_measured_gb_s": round(float(best_wbytes) / 1e9, 1)},
        "elementwise": {"fitted_gb_s": round(v["eta_elementwise"] * bw / 1e9, 1),
                        "datasheet_gb_s": round(bw / 1e9, 1),
                        "share": round(v["eta_elementwise"], 3)},
    }
    if network is not None:
        w = network["workers"].to_numpy(float)
        bus = 2 * (w - 1) / w * network["size"].to_numpy(float) / network["time_s"].to_numpy(float)
        out["allreduce_bus"] = {"fitted_gb_s": round(v["allreduce_bw_eff"] * link / 1e9, 1),
                                "datasheet_link_gb_s": round(link / 1e9, 1),
                                "share": round(v["allreduce_bw_eff"], 3),
                                "best_measured_gb_s": round(float(bus.max()) / 1e9, 1),
                                "latency_us": round(v["allreduce_latency_s"] * 1e6, 2)}
    if attn is not None and attn_hw is not None:
        a_peak = attn_hw.peak("bf16")[0]
        pre = attn[attn["kind"] == "prefill"]
        dec = attn[attn["kind"] == "decode"]
        sect: dict[str, Any] = {"measured_on": attn_hw.name,
                                "transferred": attn_hw.name != hw.name,
                                "prefill_share": round(v["eta_attn_prefill"], 3),
                                "decode_share": round(v["eta_attn_decode"], 3),
                                "fitted_prefill_tflops": round(v["eta_attn_prefill"] * peak / 1e12, 1),
                                "fitted_decode_gb_s": round(v["eta_attn_decode"] * bw / 1e9, 1)}
        if not pre.empty:
            hd = pre["n_embd"] / pre["n_q_head"]
            fl = 4.0 * pre["n_q_head"] / pre["tp"] * hd * pre["qc"] / pre["time_s"]
            sect["best_measured_prefill_tflops"] = round(float(fl.max()) / 1e12, 1)
            sect["best_measured_prefill_share"] = round(float(fl.max()) / a_peak, 3)
        if not dec.empty:
            hd = dec["n_embd"] / dec["n_q_head"]
            kvb = 2 * dec["n_kv_head"] / dec["tp"] * hd * prec.kv_cache.bytes_per_element
            by = kvb * (dec["ctx"] + dec["tokens"]) / dec["time_s"]
            sect["best_measured_decode_gb_s"] = round(float(by.max()) / 1e9, 1)
            sect["best_measured_decode_share"] = round(float(by.max()) / attn_hw.hbm_bw, 3)
        out["attention"] = sect
    return out


def _fit_compute(train: pd.DataFrame, hw: HardwareSpec, residual: str) -> dict[str, float]:
    vals = dict(fit_group("linear", train, hw, residual=residual).values)
    vals.update(fit_group("elementwise", train, hw, residual=residual).values)
    return vals


def _errors(frame: pd.DataFrame, hw: HardwareSpec, vals: dict[str, float],
            groups: Sequence[str] = ("linear", "elementwise", "layer")) -> dict[str, Any]:
    return {g: ape_stats(predict(g, frame, hw, vals), _measured(g, frame)) for g in groups}


def _pooled(parts: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, float]:
    if not parts:
        return {"rows": 0}
    return ape_stats(np.concatenate([p for p, _ in parts]), np.concatenate([m for _, m in parts]))


def _context(attn: pd.DataFrame) -> np.ndarray:
    """Each attention row's context per sequence: cached + new tokens."""
    return (attn["kv"] + attn["q"]).to_numpy(float)


def attention_holdout(attn: pd.DataFrame, long_context: float = LONG_CONTEXT) -> np.ndarray:
    """Attention rows held out: those whose context (cached + new) exceeds ``long_context``
    tokens (an extrapolation in context length; the table has one TP degree)."""
    return _context(attn) > long_context


def cross_node_quality(cross: pd.DataFrame, hw: HardwareSpec, vals: dict[str, float],
                       residual: str = "log") -> dict[str, Any]:
    """Errors of the cross-node all-reduce fit per (workers, devices per node), with the
    fit's values, and each configuration held out in turn (refitted on the others)."""
    fixed = {k: vals[k] for k in ("allreduce_latency_s", "allreduce_bw_eff")}
    pred = predict("allreduce_nic", cross, hw, vals)
    meas = _measured("allreduce_nic", cross)
    w = cross["workers"].to_numpy(float)
    bus = 2 * (w - 1) / w * cross["size"].to_numpy(float) / cross["time_s"].to_numpy(float)
    configs, held = [], []
    groups = cross.groupby(["workers", "per_node"]).indices
    for (nw, n), idx in groups.items():
        big = idx[cross["size"].to_numpy(float)[idx] >= 2 ** 24]
        configs.append({"workers": int(nw), "devices_per_node": int(n),
                        "measured_bus_gb_s_at_16MB_plus": round(float(np.median(bus[big])) / 1e9, 2)
                        if len(big) else None,
                        **ape_stats(pred[idx], meas[idx])})
        if len(groups) > 1:
            mask = np.zeros(len(cross), dtype=bool)
            mask[idx] = True
            fv = fit_group("allreduce_nic", cross[~mask], hw, fixed=fixed,
                           residual=residual).values
            held.append({"held_out": f"{int(nw)} workers, {int(n)} per node",
                         "allreduce_nic_latency_us": round(fv["allreduce_nic_latency_s"] * 1e6, 2),
                         "allreduce_nic_bw_eff": round(fv["allreduce_nic_bw_eff"], 4),
                         **ape_stats(predict("allreduce_nic", cross[mask], hw, {**fixed, **fv}),
                                     meas[mask])})
    return {"latency_us": round(vals["allreduce_nic_latency_s"] * 1e6, 2),
            "nic_share": round(vals["allreduce_nic_bw_eff"], 4),
            "fitted_nic_gb_s_per_device": round(vals["allreduce_nic_bw_eff"]
                                                * (hw.scale_out_bw or 0.0) / 1e9, 2),
            "catalog_nic_gb_s_per_device": round((hw.scale_out_bw or 0.0) / 1e9, 2),
            "all_rows": ape_stats(pred, meas), "configurations": configs,
            "leave_one_configuration_out": held}


def decode_context_terms(attn: pd.DataFrame, hw: HardwareSpec, block_size: int = 16,
                         split: float = LONG_CONTEXT, short: float = 1024.0,
                         values: dict[str, float] | None = None) -> dict[str, Any]:
    """Does decode attention over a paged KV cache cost more than the cost model's floor +
    KV bytes / (bandwidth x eta_attn_decode), per block of ``block_size`` tokens each
    sequence reads (block-table lookups, partial last blocks)?

    Fits the decode rows of an attention table (``load_attention_table``) twice, with
    eta_attn_decode and the attention floor free: as the cost model prices them, and with
    ``per_block_s`` x sum_i ceil((c_i + 1) / block_size) added (``per_block_s`` >= 0); each
    on every row and on rows of context <= ``split`` with the longer ones held out. Returns
    the fitted values and mean |predicted / measured - 1| over rows of context <= ``short``
    and > ``split`` (``values``: the other attention parameters, default: their fit on the
    whole table)."""
    dec = attn[attn["kind"] == "decode"].reset_index(drop=True)
    if dec.empty:
        raise CatalogError("no decode rows in the attention table")
    base = dict(values) if values is not None else fit_group("attention", attn, hw).values
    ctx = _context(dec)
    blocks = (dec["batch"] * np.ceil(ctx / block_size)).to_numpy(float)
    meas = dec["time_s"].to_numpy(float)
    cases = _cases(dec, attention=True)
    w = np.sqrt(_attention_weights(dec))

    def pred(x: np.ndarray) -> np.ndarray:
        vals = {**base, "eta_attn_decode": x[0], "floor_attention_s": x[1] * 1e-5}
        out = predict("attention", dec, hw, vals, cases)
        return out + (x[2] * 1e-8 * blocks if len(x) > 2 else 0.0)

    def fit(rows: np.ndarray, with_block: bool) -> np.ndarray:
        x0 = [base.get("eta_attn_decode", 0.7), base.get("floor_attention_s", 1e-5) / 1e-5]
        lo, hi = [0.01, 0.0], [1.5, 50.0]
        if with_block:
            x0, lo, hi = x0 + [0.1], lo + [0.0], hi + [1e4]
        return _best_fit(lambda x: _residuals(pred(x), meas, w)[rows], [x0], lo, hi).x

    def err(x: np.ndarray, rows: np.ndarray) -> float:
        return round(float(np.mean(np.abs(pred(x)[rows] / meas[rows] - 1.0))) * 100.0, 2)

    everything = np.ones(len(dec), dtype=bool)
    lo_rows, hi_rows = ctx <= short, attention_holdout(dec, split)
    out: dict[str, Any] = {"block_size": block_size, "rows": len(dec),
                           "short_context": f"<= {short:g} tokens", "long_context": f"> {split:g} tokens"}
    for name, with_block in (("cost_model", False), ("with_per_block_term", True)):
        x_all, x_tr = fit(everything, with_block), fit(~hi_rows, with_block)
        out[name] = {
            "eta_attn_decode": round(float(x_all[0]), 4),
            "floor_attention_us": round(float(x_all[1]) * 10.0, 2),
            **({"per_block_ns": round(float(x_all[2]) * 10.0, 3)} if with_block else {}),
            "mean_ape_pct_short": err(x_all, lo_rows), "mean_ape_pct_long": err(x_all, hi_rows),
            "mean_ape_pct_all": err(x_all, everything),
            "fit_short_held_out_long": {
                "eta_attn_decode": round(float(x_tr[0]), 4),
                **({"per_block_ns": round(float(x_tr[2]) * 10.0, 3)} if with_block else {}),
                "mean_ape_pct_short": err(x_tr, lo_rows),
                "mean_ape_pct_long_held_out": err(x_tr, hi_rows)}}
    return out


def fit_profiles(root: str | Path, hardware_name: str,
                 holdout: Sequence[str] | None = DEFAULT_HOLDOUT, name: str | None = None,
                 source: str | None = None, max_rows: int | None = None,
                 seed: int = 0, residual: str = "log",
                 notes: Sequence[str] | None = None) -> ProfileFit:
    """Fit ``hardware_name``'s profile to the tables under ``root``.

    ``holdout``: evaluations on rows left out of a fit, each 'each-model' (every model in
    turn), 'model:NAME' (one whole model) or 'tp:N' (one TP degree, in the compute and the
    all-reduce tables); None: 'each-model' where there are two models or more, and the
    largest TP degree where there are two or more. The profile itself is refitted on every
    row. Attention rows over long contexts are always held out once (when there are both).
    ``max_rows``: at most this many rows per table (a random subsample; for quick tests).
    ``residual``: see ``fit_group``. ``notes``: extra lines for the profile's notes (what
    the caller knows of these particular tables).
    """
    tables = find_tables(root, hardware_name)
    hw = get_hardware(tables.hardware)
    rng = np.random.default_rng(seed)

    def sample(df: pd.DataFrame) -> pd.DataFrame:
        if max_rows is None or len(df) <= max_rows:
            return df.reset_index(drop=True)
        idx = np.sort(rng.choice(len(df), size=max_rows, replace=False))
        return df.iloc[idx].reset_index(drop=True)

    compute = pd.concat([sample(load_compute_table(p, model=m.split("/")[-1]))
                         for m, p in tables.compute], ignore_index=True)
    network = sample(load_allreduce_table(tables.network)) if tables.network else None
    attn = sample(load_attention_table(tables.attention)) if tables.attention else None
    attn_hw = get_hardware(tables.attention_hw) if tables.attention_hw else None
    extra_notes, notes = notes, []

    # ---- full fits (the profile)
    vals = _fit_compute(compute, hw, residual)
    floors = {"linear": vals.pop("floor_linear_s"), "elementwise": vals.pop("floor_elementwise_s")}
    if network is not None:
        vals.update(fit_group("allreduce", network, hw, residual=residual).values)
    else:
        vals.update(allreduce_latency_s=hw.link_latency_s, allreduce_bw_eff=1.0)
        notes.append("allreduce_latency_s, allreduce_bw_eff: no all-reduce table for this chip; "
                     "catalog link latency and bandwidth assumed")
    cross = (load_cross_node_allreduce(tables.network)
             if tables.network is not None and hw.scale_out_bw else None)
    cross_quality = None
    if cross is not None:
        cross = sample(cross)
        base = {k: vals[k] for k in ("allreduce_latency_s", "allreduce_bw_eff")}
        vals.update(fit_group("allreduce_nic", cross, hw, fixed=base,
                              residual=residual).values)
        cross_quality = cross_node_quality(cross, hw, {**base, **{k: vals[k] for k in CROSS_NODE}},
                                           residual)
        notes.append("allreduce_nic_latency_s, allreduce_nic_bw_eff: fitted to the rows of "
                     f"{tables.rel(tables.network)} whose workers span nodes (devices_per_node "
                     "below num_workers), priced by roofline.cross_node_allreduce with the "
                     "single-node fit's NVLink terms held; fit_quality.cross_node_allreduce")
    attn_fit: dict[str, float] | None = None
    if attn is not None and attn_hw is not None:
        attn_fit = fit_group("attention", attn, attn_hw, residual=residual).values
        vals.update(eta_attn_prefill=attn_fit["eta_attn_prefill"],
                    eta_attn_decode=attn_fit["eta_attn_decode"])
        floors["attention"] = attn_fit["floor_attention_s"]
        if attn_hw.name != hw.name:
            notes.append(f"eta_attn_prefill, eta_attn_decode and the attention kernel floor: "
                         f"TRANSFERRED from {attn_hw.name} (its attention table; none measured "
                         f"on {hw.name}): the same shares of this chip's own bf16 peak and HBM "
                         "bandwidth, and the same floor in seconds, not measured here")
    else:
        vals.update(eta_attn_prefill=vals["eta_compute"], eta_attn_decode=vals["eta_memory"])
        floors["attention"] = 0.0
        notes.append("eta_attn_prefill, eta_attn_decode: no attention table; set to eta_compute "
                     "and eta_memory (assumed), attention kernel floor 0")
    vals["per_layer_overhead_s"] = sum(floors.values())
    emb = compute.loc[compute["tokens"] <= 64, EMBEDDING_OP].dropna()
    vals["fixed_overhead_s"] = float(emb.median()) if len(emb) else 0.0
    notes += [
        "per_layer_overhead_s = sum of the fitted kernel floors of one layer (linear + "
        "elementwise + attention, kernel_floors_s); the cost model adds it once per layer",
        "fixed_overhead_s: the embedding lookup's measured time at <= 64 tokens (the only "
        "per-pass kernel these tables time); the engine's CPU work per pass is not in these "
        "tables (engine_* parameters, fitted to serving runs) and the LM head is priced by the "
        "linear group",
        "all-reduce fitted to single-node rows (devices_per_node = num_workers) of "
        + (tables.rel(tables.network) if tables.network else "no table"),
        "the tables are fp16; priced as bf16 (same bytes, same tensor-core peak)",
    ]

    # ---- held-out evaluations
    if holdout is None:
        tps = sorted(int(t) for t in compute["tp"].unique())
        holdout = (["each-model"] if compute["model"].nunique() > 1 else []) + (
            [f"tp:{tps[-1]}"] if len(tps) > 1 else [])
    holdouts = []
    for spec in holdout:
        folds = _holdout_masks(spec, compute, network)
        parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        train_parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        for _label, cmask, nmask in folds:
            tr, te = compute[~cmask], compute[cmask]
            if tr.empty:
                raise CatalogError(f"holdout {spec!r}: leaves no rows to fit")
            fv = _fit_compute(tr, hw, residual)
            for g in ("linear", "elementwise", "layer"):
                parts.setdefault(g, []).append((predict(g, te, hw, fv), _measured(g, te)))
                train_parts.setdefault(g, []).append((predict(g, tr, hw, fv), _measured(g, tr)))
            if nmask is not None and network is not None and nmask.any() and (~nmask).any():
                ntr, nte = network[~nmask], network[nmask]
                nv = fit_group("allreduce", ntr, hw, residual=residual).values
                parts.setdefault("allreduce", []).append(
                    (predict("allreduce", nte, hw, nv), _measured("allreduce", nte)))
                train_parts.setdefault("allreduce", []).append(
                    (predict("allreduce", ntr, hw, nv), _measured("allreduce", ntr)))
        test = {g: _pooled(p) for g, p in parts.items()}
        test["overall"] = _pooled([x for p in parts.values() for x in p])
        train = {g: _pooled(p) for g, p in train_parts.items()}
        train["overall"] = _pooled([x for p in train_parts.values() for x in p])
        holdouts.append({"held_out": ", ".join(lbl for lbl, _, _ in folds), "spec": spec,
                         "train": train, "test": test})
    if attn is not None and attn_hw is not None:
        hmask = attention_holdout(attn)
        tr, te = attn[~hmask], attn[hmask]
        if not tr.empty and not te.empty:
            av = fit_group("attention", tr, attn_hw, residual=residual).values
            test = {"attention": ape_stats(predict("attention", te, attn_hw, av),
                                           _measured("attention", te))}
            for kind in ("prefill", "decode"):
                k = te[te["kind"] == kind]
                if not k.empty:
                    test[f"attention_{kind}"] = ape_stats(predict("attention", k, attn_hw, av),
                                                          _measured("attention", k))
            res = {"held_out": f"attention rows with context (cached + new) > "
                               f"{LONG_CONTEXT:g} tokens (table measured on {attn_hw.name})",
                   "spec": "attention-long-context",
                   "train": {"attention": ape_stats(predict("attention", tr, attn_hw, av),
                                                    _measured("attention", tr))},
                   "test": test}
            holdouts.append(res)

    fv = {**vals, **{_FLOORS[g]: f for g, f in floors.items()}}
    full = _errors(compute, hw, fv)
    if network is not None:
        full["allreduce"] = ape_stats(predict("allreduce", network, hw, fv),
                                      _measured("allreduce", network))
    if attn is not None and attn_hw is not None:
        full["attention"] = ape_stats(predict("attention", attn, attn_hw, fv),
                                      _measured("attention", attn))
    quality: dict[str, Any] = {
        "residual": ("log(predicted / measured)" if residual == "log" else
                     "predicted / measured - 1") + " per row, rows weighted so each octave of "
                    "tokens (message size for all-reduce; tokens and context for attention) of "
                    "each table counts the same; errors below are |predicted / measured - 1|",
        "groups": "linear = QKV + O + MLP up + down; elementwise = 2 norms + 2 residual adds + "
                  "rope + activation; layer = linear + elementwise (one layer's kernels, no "
                  "attention, no all-reduce); each with its kernel floor",
        "optimizer": "scipy.optimize.least_squares (trf, bounded), multi-start",
        "train_all_rows": full,
        "holdouts": holdouts,
        "datasheet": _datasheet(hw, vals, compute, attn, attn_hw, network),
    }
    if cross_quality is not None:
        quality["cross_node_allreduce"] = cross_quality
    if attn_fit is not None and attn_hw is not None and (attn["kind"] == "decode").any():
        quality["decode_paged_kv"] = {"measured_on": attn_hw.name,
                                      **decode_context_terms(attn, attn_hw, values=attn_fit)}
    other_nets = []
    for p in tables.network_other:
        try:
            nt = load_allreduce_table(p)
        except CatalogError as exc:
            other_nets.append({"table": tables.rel(p), "error": str(exc)})
            continue
        nv = fit_group("allreduce", nt, hw, residual=residual).values
        other_nets.append({"table": tables.rel(p), "not_used_for_profile": True,
                           "allreduce_latency_us": round(nv["allreduce_latency_s"] * 1e6, 2),
                           "allreduce_bw_eff": round(nv["allreduce_bw_eff"], 4),
                           "fit": ape_stats(predict("allreduce", nt, hw, nv),
                                            _measured("allreduce", nt))})
    if other_nets:
        quality["other_network_tables"] = other_nets
    used = [tables.rel(p) for _, p in tables.compute]
    used += [tables.rel(tables.network)] if tables.network else []
    used += [tables.rel(tables.attention)] if tables.attention else []
    notes = notes + list(extra_notes or ())
    if max_rows is not None:
        notes.append(f"fitted on a random subsample of at most {max_rows} rows per table")
    return ProfileFit(hardware=hw.name, values={k: float(vals[k]) for k in FITTED
                                                if vals.get(k) is not None},
                      floors={f"{g}_s": float(f) for g, f in floors.items()}, quality=quality,
                      notes=notes, tables=used, name=name or hw.name,
                      source=source or f"per-operator tables under {tables.root}")


# ------------------------------------------------------------------ writing


def write_profile(profile: dict[str, Any], path: str | Path, force: bool = False) -> Path:
    """Write the profile YAML atomically (temp file + rename); an existing file is kept
    unless ``force``."""
    from specsim.errors import ScenarioError
    from specsim.outputs import write_file

    try:
        return write_file(path, yaml.safe_dump(profile, sort_keys=False, width=100), force)
    except ScenarioError as exc:  # this package's own error type, the same one line
        raise CatalogError(str(exc)) from None


def summary_lines(fit: ProfileFit) -> list[str]:
    """A few lines for the terminal: parameters and held-out errors."""
    v = fit.values
    lines = [f"{fit.hardware}: eta_compute {v['eta_compute']:.3f}, matmul_half_tokens "
             f"{v['matmul_half_tokens']:.0f}, eta_memory {v['eta_memory']:.3f}, eta_elementwise "
             f"{v['eta_elementwise']:.3f}, eta_attn_prefill {v['eta_attn_prefill']:.3f}, "
             f"eta_attn_decode {v['eta_attn_decode']:.3f}",
             f"  per_layer_overhead {v['per_layer_overhead_s'] * 1e6:.1f} us, fixed_overhead "
             f"{v['fixed_overhead_s'] * 1e6:.1f} us, all-reduce {v['allreduce_latency_s'] * 1e6:.1f}"
             f" us + bandwidth x {v['allreduce_bw_eff']:.3f}"]
    for h in fit.quality["holdouts"]:
        parts = [f"{g} {s['median_ape_pct']:.1f}/{s['max_ape_pct']:.1f}"
                 for g, s in h["test"].items() if s.get("rows")]
        lines.append(f"  held out {h['held_out']}: median/worst % " + ", ".join(parts))
    return lines
