"""Vidur's replay CSV: ``arrived_at`` (s), ``num_prefill_tokens``, ``num_decode_tokens``.

Times are kept as written, so specsim and Vidur replay exactly the same requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from specsim.traces.formats.common import assemble, read_csv_columns
from specsim.traces.reading import column_floats, column_ints
from specsim.traces.schema import Trace

NAME = "vidur"
REQUIRED = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")


def matches(header: Sequence[str]) -> bool:
    """Vidur files are recognised by ``arrived_at`` and ``num_prefill_tokens``."""
    return "arrived_at" in header and "num_prefill_tokens" in header


def load(
    path: Path,
    origin: str,
    *,
    keep_failed: bool = False,
    sort: bool = False,
    keep_columns: Sequence[str] = (),
) -> Trace:
    """Read a Vidur request trace."""
    lines, cols, extras = read_csv_columns(path, origin, NAME, REQUIRED, {
        "arrival": (lambda c, ln: column_floats(c, ln, "arrived_at", origin),
                    np.float64),
        "prompt": (lambda c, ln: column_ints(c, ln, "num_prefill_tokens", origin), np.int64),
        "output": (lambda c, ln: column_ints(c, ln, "num_decode_tokens", origin), np.int64),
    }, keep_columns=keep_columns)
    return assemble(origin, lines, cols["arrival"], cols["prompt"], cols["output"],
                    keep_failed=keep_failed, sort=sort, time_column="arrived_at", extras=extras)
