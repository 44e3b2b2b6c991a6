"""Load any supported trace file into the schema, detecting its format from its header."""

from __future__ import annotations

import json
from collections.abc import Sequence
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING

from specsim import safe_read
from specsim.traces.errors import TraceError, at_line, names, show
from specsim.traces.formats import azure, burstgpt, generic, mooncake, vidur
from specsim.traces.names import FORMATS  # noqa: E402
from specsim.traces.reading import first_line, split_header
from specsim.traces.schema import Trace

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

_CSV_FORMATS = (azure, burstgpt, vidur, generic)


def detect_format(path: Path, origin: str | None = None) -> tuple[str, bool]:
    """Return ``(format, is_jsonl)`` judged from the first line of ``path``."""
    origin = origin or str(path)
    line = first_line(path, origin)
    if line.startswith("{"):
        try:
            first = safe_read.json_loads(line)
        except json.JSONDecodeError as exc:
            raise at_line(origin, 1, f"invalid JSON ({exc.msg})") from exc
        except safe_read.DuplicateKeyError as exc:
            raise at_line(origin, 1, f"field {show(exc.args[0])} appears twice in one "
                          "object; give each field once") from None
        if mooncake.matches(first):
            return mooncake.NAME, True
        if generic.matches(first):
            return generic.NAME, True
        raise at_line(
            origin,
            1,
            f"unrecognised JSON lines (keys {names(first)}); expected Mooncake "
            "(timestamp, input_length, output_length, hash_ids) or generic "
            "(arrival_s, prompt_tokens, output_tokens)",
        )
    header = split_header(line, origin)
    for module in _CSV_FORMATS:
        if module.matches(header):
            return module.NAME, False
    raise at_line(
        origin,
        1,
        f"unrecognised trace header ({names(header)}); expected Azure (TIMESTAMP, "
        "ContextTokens, GeneratedTokens), BurstGPT (Timestamp, Request tokens, Response "
        "tokens, ...), Vidur (arrived_at, num_prefill_tokens, num_decode_tokens) or generic "
        "(arrival_s, prompt_tokens, output_tokens); or name the format",
    )


def load_trace(
    path: str | PathLike[str],
    format: str = "auto",
    keep_failed: bool = False,
    *,
    sort: bool = False,
    keep_columns: Sequence[str] = (),
    origin: str | None = None,
) -> pd.DataFrame:
    """Read a trace file (``.gz`` too) into the schema DataFrame (``read_trace``'s frame)."""
    return read_trace(path, format, keep_failed, sort=sort, keep_columns=keep_columns,
                      origin=origin).frame()


def read_trace(
    path: str | PathLike[str],
    format: str = "auto",
    keep_failed: bool = False,
    *,
    sort: bool = False,
    keep_columns: Sequence[str] = (),
    origin: str | None = None,
) -> Trace:
    """Read a trace file (``.gz`` too) into the schema's trace.

    ``keep_failed`` replays failed requests (BurstGPT failures, zero-output rows) as
    prefill + 1 token instead of dropping them; ``sort`` orders an unsorted file instead
    of rejecting it; ``keep_columns`` carries raw source columns along (for classes).
    ``df.attrs`` records ``source``, ``format`` and ``failed_requests``. Any problem is
    a TraceError naming the file and line; nothing partial is returned.
    """
    file = Path(path)
    origin = origin or str(path)
    if format not in FORMATS:
        raise TraceError(
            f"{origin}: unknown trace format {format!r} (expected one of {', '.join(FORMATS)})"
        )
    if not file.is_file():
        raise TraceError(f"{origin}: no such trace file")
    detected, jsonl = detect_format(file, origin)
    name = detected if format == "auto" else format
    options = {"keep_failed": keep_failed, "sort": sort, "keep_columns": tuple(keep_columns)}
    if name == generic.NAME:
        df = generic.load(file, origin, jsonl=jsonl, **options)
    elif name == mooncake.NAME:
        if not jsonl:
            raise at_line(origin, 1, "the mooncake format is JSON lines, but this file is not")
        df = mooncake.load(file, origin, **options)
    else:
        if jsonl:
            raise at_line(origin, 1, f"the {name} format is CSV, but this file is JSON lines")
        module = {m.NAME: m for m in _CSV_FORMATS}[name]
        df = module.load(file, origin, **options)
    df.attrs["format"] = name
    return df
