"""The one rule for a number, a choice and a mapping's keys, for every file specsim reads.

The scenario schema, the acceptance forms, catalogs, traces and calibration files all check
the numbers a user writes the same way: finite; integers also take integral floats such as
``1e3``; inclusive or exclusive bounds; a message that quotes what was written. Each check
returns the value as it will be used or raises ``ValueRuleError`` with the message alone
(what was expected, what was given); the caller puts the file and key in front.
"""

from __future__ import annotations

import math
from typing import Any

from specsim.messages import show, unknown_key

# Integer keys without their own upper bound stop here: beyond 2**53 a YAML float such as
# 1e18 no longer holds an exact integer, and numpy's int64 arithmetic would overflow.
INT_HI = 2**53


class ValueRuleError(ValueError):
    """A value broke its rule; ``str(exc)`` is the message without the key (and ``row``, the
    0-based row of a column's first bad value)."""

    row: int = 0


def bound_text(x: float) -> str:
    """A bound as a person writes it: 1, 0.9, 1000000, 1e+09."""
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) < 1e7):
        return f"{int(x)}"
    return f"{x:g}"


def number(value: Any, *, integer: bool = False, lo: float | None = None,
           hi: float | None = None, exclusive_lo: bool = False, nullable: bool = False,
           limit: int = 60) -> Any:
    """``value`` as an int (``integer``) or a float within the bounds (integers stop at
    ``INT_HI`` when ``hi`` is None); None when ``nullable``; else ``ValueRuleError``."""
    word = "an integer" if integer else "a number"
    if value is None:
        if nullable:
            return None
        raise ValueRuleError("expected a value, got null")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueRuleError(f"expected {word}, got {show(value, limit)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueRuleError(f"expected a finite number, got {value}")
    given = value  # messages quote what was written (1e+30, not its int)
    if integer:
        if isinstance(value, float):
            if not value.is_integer():
                raise ValueRuleError(f"expected an integer, got {show(value, limit)}")
            value = int(value)
    else:
        try:
            value = float(value)
        except OverflowError:  # an int too large for a float (JSON allows 1 and 400 zeros)
            raise ValueRuleError(f"expected a finite number, got {show(value, limit)}") from None
    top = hi if hi is not None else (INT_HI if integer else None)
    if lo is not None and (value < lo or (exclusive_lo and value == lo)):
        rel = "greater than" if exclusive_lo else "at least"
        raise ValueRuleError(f"expected {word} {rel} {bound_text(lo)}, got {show(given, limit)}")
    if top is not None and value > top:
        raise ValueRuleError(f"expected {word} at most {bound_text(top)}, got "
                             f"{show(given, limit)}")
    return value


def choice(value: Any, choices: list[str] | tuple[str, ...], limit: int = 60) -> str:
    """``value`` if it is one of ``choices``, else ``ValueRuleError`` listing them."""
    if not isinstance(value, str) or value not in choices:
        raise ValueRuleError(f"expected one of {', '.join(choices)}, got {show(value, limit)}")
    return value


def known_keys(mapping: dict[str, Any], keys: list[str] | tuple[str, ...],
               qualifier: str = "") -> None:
    """Every key of ``mapping`` is one of ``keys``; else ``ValueRuleError`` naming the first
    unknown one with a "did you mean" (the message starts with the key: ``KEY: unknown key``)."""
    for key in mapping:
        if key not in keys:
            name = key if isinstance(key, str) and key.isprintable() else show(key)
            raise ValueRuleError(f"{name}: " + unknown_key(key, list(keys), qualifier))


def column(raw: Any, *, integer: bool = False, lo: float | None = None,
           hi: float | None = None, exclusive_lo: bool = False, blank_ok: bool = False,
           text_ok: bool = False) -> Any:
    """A whole column (a pandas Series or a sequence) by the rule of ``number``, checked at
    once and returned as a float64 array (callers cast integers); the first bad row raises
    ``ValueRuleError`` with ``number``'s own message and ``exc.row`` (0-based). ``blank_ok``
    lets NaN / None / an empty field stand for "not given"; ``text_ok`` reads numbers written
    as text (a CSV field), which a typed column (a DataFrame, JSON) refuses as "3"."""
    import numpy as np  # here: the scalar rules above are read by modules without numpy
    import pandas as pd

    series = raw if isinstance(raw, pd.Series) else pd.Series(list(raw), dtype=object)
    if pd.api.types.is_bool_dtype(series.dtype):
        wrong = np.ones(len(series), dtype=bool)
    elif series.dtype == object and not text_ok:
        wrong = np.fromiter((isinstance(v, bool | str) or not (v is None or isinstance(
            v, int | float | np.integer | np.floating)) for v in series), bool, len(series))
    else:
        wrong = np.zeros(len(series), dtype=bool)
    values = pd.to_numeric(series.where(~wrong, None) if wrong.any() else series,
                           errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    blank = series.isna().to_numpy() | (series.astype(object) == "").to_numpy()
    bad = wrong | ~np.isfinite(values)
    if blank_ok:
        bad &= ~blank
    with np.errstate(invalid="ignore"):
        if integer:
            bad |= values != np.round(values)
        top = hi if hi is not None else (INT_HI if integer else None)
        if lo is not None:
            bad |= (values <= lo) if exclusive_lo else (values < lo)
        if top is not None:
            bad |= values > top
    hits = np.flatnonzero(bad)
    if hits.size:
        row = int(hits[0])
        given = series.iloc[row]
        if type(given).__module__ == "numpy" and hasattr(given, "item"):
            given = given.item()
        blank_cell = text_ok and (given is None or given == "" or (
            isinstance(given, float) and math.isnan(given)))  # read_csv's NaN for a blank
        if text_ok and isinstance(given, str):  # quoted as the number it reads as: nan, -5
            try:
                given = float(given)
            except ValueError:
                pass  # not a number: quoted as written
            else:
                if given.is_integer() and abs(given) <= INT_HI:
                    given = int(given)
        try:
            if blank_cell:
                raise ValueRuleError(f"expected {'an integer' if integer else 'a number'}, "
                                     "got an empty field")
            number(given, integer=integer, lo=lo, hi=hi, exclusive_lo=exclusive_lo)
            message = f"expected {'an integer' if integer else 'a number'}, got {show(given)}"
        except ValueRuleError as exc:
            message = str(exc)
        err = ValueRuleError(message)
        err.row = row
        raise err
    return values
