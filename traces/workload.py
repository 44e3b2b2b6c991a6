"""Build the request trace a scenario's ``workload:`` section describes.

The section names one source, ``trace:`` (a file) or ``synthetic:`` (a generator), plus
transform keys, which may sit at the ``workload`` level or inside the source mapping.
Every key is checked here; a problem is a TraceError naming ``workload.<key path>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specsim.traces import transforms as tf
from specsim.traces.closed_loop import ClosedLoopSpec, parse_closed_loop
from specsim.traces.errors import TraceError, show
from specsim.traces.loaders import FORMATS, read_trace
from specsim.traces.schema import Trace
from specsim.traces.seeding import stream
from specsim.traces.spec import Section, is_finite, is_real
from specsim.traces.synthetic import SyntheticSpec, generate, parse_synthetic

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

TRANSFORM_KEYS = (
    "start_s",
    "end_s",
    "speedup",
    "qps",
    "sample",
    "max_requests",
    "max_context",
    "context_overflow",
    "class",
    "class_mix",
    "temperature",
    "slo_tier",
    "seed",
)


class _Keys:
    """Finds each transform key at the workload level or inside the source mapping."""

    def __init__(self, root: Section, source: Section) -> None:
        self.root, self.source = root, source
        for key in TRANSFORM_KEYS:
            if root.has(key) and source.has(key):
                raise TraceError(f"{source.key(key)}: also set as workload.{key}; set it once")

    def at(self, key: str) -> Section:
        """The section that holds ``key`` (the workload level when neither does)."""
        return self.source if self.source.has(key) else self.root


def _source(root: Section) -> tuple[str, Section]:
    present = [name for name in ("trace", "synthetic") if root.has(name)]
    if len(present) != 1:
        got = " and ".join(present) if present else "neither"
        raise TraceError(f"workload: expected exactly one of trace or synthetic, got {got}")
    return present[0], root.section(present[0])


def _class_mix(sec: Section) -> dict[str, float]:
    raw = sec.raw("class_mix")
    if not isinstance(raw, dict) or not raw:
        raise sec.error(
            "class_mix", "a mapping of class name to weight, e.g. {code: 0.3, chat: 0.7}", raw
        )
    for name, weight in raw.items():
        if not isinstance(name, str) or not name:
            raise sec.error("class_mix", "class names as keys", name)
        if not is_real(weight) or not is_finite(weight) or weight < 0:
            raise TraceError(
                f"{sec.key('class_mix')}.{name}: expected a weight >= 0, got {show(weight)}"
            )
    if sum(float(w) for w in raw.values()) <= 0:
        raise sec.error("class_mix", "at least one positive weight", raw)
    return {k: float(v) for k, v in raw.items()}


@dataclass
class WorkloadPlan:
    """Everything a ``workload:`` section asks for, checked, before any work is done."""

    kind: str
    seed: int
    trace_path: Path | None = None
    trace_format: str = "auto"
    keep_failed: bool = False
    sort: bool = False
    class_column: str | None = None
    class_map: dict[str, str] | None = None
    synthetic: SyntheticSpec | None = None
    start_s: float | None = None
    end_s: float | None = None
    speedup: float | None = None
    qps: float | None = None
    sample_fraction: float | None = None
    sample_n: int | None = None
    max_requests: int | None = None
    max_context: int | None = None
    context_overflow: str = "truncate"
    fixed_class: str | None = None
    class_mix: dict[str, float] | None = None
    temperature: float | None = None
    slo_tier: str | dict[str, str] | None = None  # one tier, or workload class -> tier
    closed_loop: ClosedLoopSpec | None = None


def _parse_source(plan: WorkloadPlan, src: Section, base_dir: Path) -> None:
    if plan.kind == "trace":
        plan.trace_path = src.file("path", base_dir)
        plan.trace_format = src.string("format", "auto", choices=FORMATS) or "auto"
        plan.keep_failed = src.boolean("keep_failed")
        plan.sort = src.boolean("sort")
        plan.class_column = src.string("class_column")
        if src.has("class_map"):
            if plan.class_column is None:
                raise TraceError(f"{src.key('class_map')}: needs class_column")
            cmap = src.section("class_map")
            plan.class_map = {name: str(cmap.string(name)) for name in cmap.data}
    else:
        plan.synthetic = parse_synthetic(src, base_dir)


def _parse_transforms(plan: WorkloadPlan, keys: _Keys) -> None:
    plan.speedup = keys.at("speedup").number("speedup", None, positive=True)
    plan.qps = keys.at("qps").number("qps", None, positive=True)
    if plan.speedup is not None and plan.qps is not None:
        raise TraceError("workload: set either speedup or qps, not both")
    plan.start_s = keys.at("start_s").number("start_s", None, minimum=0.0)
    plan.end_s = keys.at("end_s").number("end_s", None, positive=True)
    if plan.start_s is not None and plan.end_s is not None and plan.end_s <= plan.start_s:
        raise keys.at("end_s").error(
            "end_s", f"a time after start_s ({plan.start_s:g})", plan.end_s
        )
    if keys.at("sample").has("sample"):
        s = keys.at("sample").section("sample")
        plan.sample_fraction = s.number("fraction", None, positive=True, maximum=1.0)
        plan.sample_n = s.integer("n", None, positive=True)
        s.finish()
        if (plan.sample_fraction is None) == (plan.sample_n is None):
            raise TraceError(f"{s.path}: set exactly one of fraction or n")
    plan.max_requests = keys.at("max_requests").integer("max_requests", None, positive=True)
    plan.max_context = keys.at("max_context").integer("max_context", None, minimum=2)
    plan.context_overflow = (
        keys.at("context_overflow").string(
            "context_overflow", "truncate", choices=tf.CONTEXT_POLICIES
        )
        or "truncate"
    )
    chosen = [name for name in ("class", "class_mix") if keys.at(name).has(name)]
    if plan.class_column:
        chosen.append("class_column")
    if len(chosen) > 1:
        raise TraceError(
            f"workload: set only one of class, class_mix, class_column (got {', '.join(chosen)})"
        )
    plan.fixed_class = keys.at("class").string("class")
    if keys.at("class_mix").has("class_mix"):
        plan.class_mix = _class_mix(keys.at("class_mix"))
    plan.temperature = keys.at("temperature").number("temperature", None, minimum=0.0)
    plan.slo_tier = _slo_tier(keys.at("slo_tier"))


def _slo_tier(sec: Section) -> str | dict[str, str] | None:
    """``slo_tier``: every request's tier, or a mapping of workload class to tier (e.g.
    ``{chat: premium, summarise: batch}``: each class of the workload must be named)."""
    raw = sec.raw("slo_tier")
    if not isinstance(raw, dict):
        return sec.string("slo_tier")
    if not raw:
        raise sec.error("slo_tier", "a tier name or a mapping of class name to tier", raw)
    for name, tier in raw.items():
        if not isinstance(name, str) or not name or not isinstance(tier, str) or not tier:
            raise TraceError(f"{sec.key('slo_tier')}.{name}: expected a tier name, got "
                             f"{show(tier)}")
    return dict(raw)


def parse_workload(section: dict[str, Any], base_dir: Path, seed: int) -> WorkloadPlan:
    """Check a ``workload:`` mapping without reading or generating anything heavy.

    (An ``empirical`` length distribution reads its trace file here.) Useful for
    ``specsim validate``; ``build_workload`` runs it first.
    """
    root = Section(section, "workload")
    kind, src = _source(root)
    keys = _Keys(root, src)
    seed = keys.at("seed").integer("seed", seed, minimum=0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise TraceError(f"workload.seed: expected an integer >= 0, got {show(seed)}")
    plan = WorkloadPlan(kind=kind, seed=seed)
    _parse_source(plan, src, Path(base_dir))
    _parse_transforms(plan, keys)
    if root.has("closed_loop"):
        plan.closed_loop = parse_closed_loop(root.section("closed_loop"), Path(base_dir))
    src.finish()
    root.finish()
    return plan


def _produce(plan: WorkloadPlan, log: list[str]) -> Trace:
    if plan.kind == "trace":
        assert plan.trace_path is not None
        keep = [plan.class_column] if plan.class_column else []
        df = read_trace(
            plan.trace_path,
            plan.trace_format,
            keep_failed=plan.keep_failed,
            sort=plan.sort,
            keep_columns=keep,
            origin=str(plan.trace_path),
        )
        log.append(f"trace {plan.trace_path} ({df.attrs.get('format')}): {len(df)} requests")
        if df.attrs.get("failed_requests"):
            verb = "kept" if df.attrs.get("failed_kept") else "dropped"
            log.append(f"failed requests {verb}: {df.attrs['failed_requests']}")
        return df
    assert plan.synthetic is not None
    # max_requests keeps the first N by arrival; with nothing before it that drops
    # requests (window, sample), the generator stops after those N instead of drawing all.
    unfiltered = plan.start_s is None and plan.end_s is None
    unfiltered = unfiltered and plan.sample_fraction is None and plan.sample_n is None
    limit = plan.max_requests if unfiltered else None
    df = generate(
        plan.synthetic, plan.seed, qps=plan.qps, origin="workload.synthetic", limit=limit
    )
    drawn = f" (the first {limit}: max_requests)" if limit is not None else ""
    log.append(f"synthetic {plan.synthetic.arrivals.process}: {len(df)} requests{drawn}")
    return df


def build_workload(
    section: dict[str, Any], base_dir: Path, seed: int, max_context: int | None = None
) -> pd.DataFrame:
    """``workload_trace``'s trace as a DataFrame."""
    return workload_trace(section, base_dir, seed, max_context).frame()


def workload_trace(
    section: dict[str, Any], base_dir: Path, seed: int, max_context: int | None = None
) -> Trace:
    """The trace for a scenario's ``workload:`` mapping (already YAML-parsed).

    Paths are relative to ``base_dir`` (the scenario's folder). ``max_context`` is the
    model's context length; ``workload.max_context`` may lower it. ``df.attrs`` holds
    ``workload_log`` (one line per step), ``capped_requests``, ``dropped_requests``,
    ``failed_requests`` and ``seed``. Same section and seed give an identical trace.
    """
    plan = parse_workload(section, base_dir, seed)
    log: list[str] = []
    df = _produce(plan, log)
    attrs = dict(df.attrs)
    if plan.start_s is not None or plan.end_s is not None:
        before = len(df)
        df = tf.window(df, plan.start_s or 0.0, plan.end_s)
        end = "end" if plan.end_s is None else f"{plan.end_s:g}"
        log.append(f"window [{plan.start_s or 0:g}, {end}) s: {before} -> {len(df)} requests")
    if plan.speedup is not None:
        df = tf.scale_time(df, plan.speedup)
        log.append(f"speedup x{plan.speedup:g}")
    if plan.qps is not None and plan.kind == "trace":
        rate = tf.mean_rate(df)
        if rate <= 0:
            raise TraceError(
                "workload.qps: the trace has no measurable rate (fewer than 2 distinct arrival times)"
            )
        df = tf.scale_time(df, plan.qps / rate)
        log.append(f"qps {plan.qps:g}: replayed x{plan.qps / rate:.4g} faster")
    if plan.sample_fraction is not None or plan.sample_n is not None:
        before = len(df)
        df = tf.sample(df, stream(plan.seed, "sample"), plan.sample_fraction, plan.sample_n)
        log.append(f"sample: {before} -> {len(df)} requests")
    if plan.max_requests is not None and len(df) > plan.max_requests:
        df = tf.limit(df, plan.max_requests)
        log.append(f"max_requests: first {plan.max_requests}")
    limit = plan.max_context
    if max_context is not None:
        limit = max_context if limit is None else min(limit, max_context)
    capped = dropped = 0
    if limit is not None:
        df, over = tf.cap_context(df, limit, plan.context_overflow, "workload.max_context")
        if plan.context_overflow == "drop":
            dropped = over
        else:
            capped = over
        if over:
            verb = "dropped" if dropped else "truncated"
            log.append(f"max_context {limit}: {over} requests {verb}")
    if plan.fixed_class is not None:
        df = tf.fixed_class(df, plan.fixed_class)
    elif plan.class_mix is not None:
        df = tf.class_mix(df, plan.class_mix, stream(plan.seed, "class"))
    elif plan.class_column:
        df = tf.class_from_column(
            df, plan.class_column, plan.class_map, "workload.trace.class_column"
        )
    if len(df) == 0:
        raise TraceError("workload: no requests left after the window, sampling and context limits")
    df = tf.fill_defaults(df, plan.temperature, plan.slo_tier, "workload")
    df.attrs.clear()
    df.attrs.update(
        {k: v for k, v in attrs.items() if k in ("source", "format", "failed_requests")}
    )
    df.attrs.update(
        {
            "workload_log": log,
            "capped_requests": capped,
            "dropped_requests": dropped,
            "seed": plan.seed,
        }
    )
    if plan.closed_loop is not None:  # arrival times are written by the clients as they run
        df.attrs["closed_loop"] = plan.closed_loop
        log.append(f"closed loop: {plan.closed_loop.clients} clients")
    return df
