"""Mooncake traces (FAST'25 release): JSON lines with ``timestamp`` (ms),
``input_length``, ``output_length`` and ``hash_ids`` (one id per 512-token block; equal
ids across requests are shared prefix blocks, which the KV cache model reuses).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specsim.traces.formats.common import assemble
from specsim.traces.reading import is_int_list, iter_json_lines, json_field, json_number
from specsim.traces.schema import Trace, blocks_column

NAME = "mooncake"
REQUIRED = ("timestamp", "input_length", "output_length")


def matches(first: dict[str, Any]) -> bool:
    """Mooncake lines are recognised by ``timestamp`` and ``input_length``."""
    return "timestamp" in first and "input_length" in first


def load(
    path: Path,
    origin: str,
    *,
    keep_failed: bool = False,
    sort: bool = False,
    keep_columns: Sequence[str] = (),
) -> Trace:
    """Read a Mooncake JSONL trace line by line."""
    # Compact typed buffers: a long trace never sits in memory as Python int objects.
    lines, times, prompt, output = array("q"), array("d"), array("q"), array("q")
    blocks: list[tuple[int, ...]] = []
    extras: dict[str, list[Any]] = {c: [] for c in keep_columns}
    for number, obj in iter_json_lines(path, origin):
        lines.append(number)
        times.append(json_number(obj, "timestamp", number, origin))
        prompt.append(
            json_number(obj, "input_length", number, origin, integer=True, lo=0)
        )
        output.append(
            json_number(obj, "output_length", number, origin, integer=True, lo=0)
        )
        if "hash_ids" in obj:
            ids = json_field(obj, "hash_ids", number, origin, is_int_list, "a list of integers")
            blocks.append(tuple(ids))
        else:
            blocks.append(())
        for c in keep_columns:
            extras[c].append(
                str(json_field(obj, c, number, origin, lambda v: v is not None, "a value"))
            )
    block_col = blocks_column(blocks, len(blocks))
    return assemble(
        origin,
        np.frombuffer(lines, dtype=np.int64),
        np.frombuffer(times, dtype=np.float64) / 1000.0,
        np.frombuffer(prompt, dtype=np.int64),
        np.frombuffer(output, dtype=np.int64),
        keep_failed=keep_failed,
        sort=sort,
        time_column="timestamp",
        columns={"prefix_block_ids": block_col},
        extras={c: np.asarray(v, dtype=object) for c, v in extras.items()},
    )
