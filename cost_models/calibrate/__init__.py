"""Calibration: a real torch microbenchmark and speculative-decoding loop, fitted into the roofline.

``bench`` times verification passes of a plain torch transformer over a grid of batch size x
query tokens x context; ``fit`` fits the roofline's efficiencies and overheads to them (or to a
user's own engine measurements) and writes a profile; ``specdec`` runs exact speculative
sampling on SmolLM2-135M to measure real acceptance and time per output token. Nothing here
imports torch at package import time, so ``--from-measurements`` works without the extra.
"""

from __future__ import annotations

from ..errors import CatalogError

INSTALL_HINT = "calibrate needs torch: pip install -e '.[calibrate]'"


def require_torch() -> None:
    """Raise a one-line CatalogError when the optional ``calibrate`` extra is missing."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise CatalogError(INSTALL_HINT) from None
