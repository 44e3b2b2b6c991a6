"""``calibrate --model NAME``: time the served model's own shape on this device and fit a profile.

The passes are written first (JSON lines, the ``--from-steps`` format, kept beside the
profile so anyone can refit or compare them) and then read back and fitted by the same code
as ``--from-steps`` (``steps.py``): each model left out in turn and 5 folds of rows give the
held-out errors; the profile is the fit on every pass. On a GPU the chip is the catalog's
(from the device name, or ``--hardware``); on a CPU the measured matmul and copy ceilings
become an inline ``hardware_spec`` that a scenario can price with.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from specsim import yamlio

from ..catalog import ModelSpec, model_from_dict
from ..errors import CatalogError
from .steps import StepsData, catalog_model, fit_table, hardware_of, profile, read_steps


def resolve_model(ref: str) -> ModelSpec:
    """A catalog model (case-insensitive), or a YAML file holding one model's catalog fields
    plus ``name`` (a model the catalog lacks)."""
    p = Path(ref)
    if p.suffix.lower() in (".yaml", ".yml"):
        entry = yamlio.load_file(p, "a model entry (YAML)")
        if not isinstance(entry, dict):
            raise CatalogError(f"{p}: expected a mapping of the catalog's model fields")
        entry = dict(entry)
        name = entry.pop("name", None)
        if not isinstance(name, str) or not name:
            raise CatalogError(f"{p}: name: expected the model's name")
        entry.setdefault("source", f"{p.name} (user's model entry)")
        return model_from_dict(name, entry, str(p))
    return catalog_model(ref, Path("--model"), 0)


def require_device(device: str) -> None:
    """One line, before any work, when ``--device cuda`` has no GPU to time."""
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise CatalogError(f"calibrate --device cuda: torch {torch.__version__} sees no CUDA "
                           "device (a CPU build of torch, or no GPU here); use --device cpu, "
                           "or --from-steps FILE with passes timed on the GPU")


def ceilings_line(info: dict[str, Any], hw) -> str:
    """The device's measured matmul and copy ceilings against its datasheet."""
    peak, bw = hw.peak("bf16")[0], hw.hbm_bw
    return (f"  measured ceilings: matmul {info['matmul_tflops']:.3g} TFLOP/s "
            f"({info['matmul_tflops'] * 1e12 / peak:.0%} of the datasheet's "
            f"{peak / 1e12:.3g}), copy {info['copy_gb_s']:.3g} GB/s "
            f"({info['copy_gb_s'] * 1e9 / bw:.0%} of {bw / 1e9:.3g})")


def fitted_line(values: dict[str, float], hw) -> str:
    """Fitted efficiencies as rates, next to the datasheet's."""
    peak, bw = hw.peak("bf16")[0], hw.hbm_bw
    return (f"  fitted: GEMMs at {values['eta_compute'] * peak / 1e12:.3g} TFLOP/s, weight "
            f"streaming at {values['eta_memory'] * bw / 1e9:.3g} GB/s, decode attention at "
            f"{values['eta_attn_decode'] * bw / 1e9:.3g} GB/s (datasheet "
            f"{peak / 1e12:.3g} TFLOP/s, {bw / 1e9:.3g} GB/s)")


def calibrate_models(refs: list[str], device: str, out: Path, steps_out: Path, *,
                     quick: bool = False, layers: int | None = None,
                     hardware: str | None = None, name: str | None = None,
                     dtype: str = "bf16", force: bool = False,
                     say: Callable[[str], None] = print) -> dict[str, Any]:
    """Time every model of ``refs`` on ``device``, write the passes and the profile."""
    from specsim.outputs import write_file

    from .bench import hardware_entry
    from .fit import hardware_from_profile
    from .profiles import write_profile
    from .shape_bench import ShapeGrid, dumps, info_record, time_model

    models = {m.name: m for m in (resolve_model(r) for r in refs)}
    require_device(device)
    grid = ShapeGrid.for_device(device, quick)
    say(f"measuring the {device} device's matmul and copy ceilings")
    info = info_record(device, dtype, quick)
    records = [info]
    for spec in models.values():
        records += time_model(spec, grid, device, dtype, layers, progress=say)
    write_file(steps_out, dumps(records), force)
    say(f"wrote {steps_out} ({len(records) - 1} passes)")

    steps, info, skipped = read_steps(steps_out)
    entry = None
    if device == "cpu":
        entry = hardware_entry(name or "cpu-measured", info["matmul_tflops"] * 1e12,
                               info["copy_gb_s"] * 1e9, dtype, device)
        hw: Any = hardware_from_profile({"hardware_spec": entry})
    else:
        hw = hardware_of(info, hardware)
    data = StepsData(steps, hw, steps_out, info, models={m.name: m for m in models.values()})
    how = f"specsim calibrate --device {device} --model {' --model '.join(refs)}"
    fit = fit_table(data, info, skipped, steps_out.name, name, how=how)
    doc = profile(fit, notes=[
        "timed by specsim calibrate --model: the models' own shapes with random weights in "
        "plain torch (decode/verify as CUDA graphs on a GPU), not an engine: an engine's fused "
        "kernels make small passes faster than this"])
    if entry is not None:
        doc["hardware_spec"] = entry
        doc["device_type"] = "cpu"
    from .steps import summary_lines

    for line in summary_lines(fit):
        say(line)
    say(ceilings_line(info, data.hw))
    say(fitted_line(fit.values, data.hw))
    write_profile(doc, out, force=force)
    say(f"wrote {out}")
    return doc
