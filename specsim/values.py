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


#: A number written as text, as a CSV field holds it (pandas' ``to_numeric`` reads the same):
#: ASCII digits, an optional sign, point and exponent, or inf / infinity / nan; spaces around
_TEXT_NUMBER = None


def _text_number():
    global _TEXT_NUMBER
    if _TEXT_NUMBER is None:
        import re

        _TEXT_NUMBER = re.compile(r"\s*[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
                                  r"|inf(?:inity)?|nan)\s*", re.ASCII | re.IGNORECASE)
    return _TEXT_NUMBER


def _one_float(v: Any) -> float:
    """One cell as a float (NaN where it is no number): a number, or text ``_TEXT_NUMBER``
    reads."""
    if isinstance(v, str):
        if _text_number().fullmatch(v) is None:
            return math.nan
        return float(v)
    if isinstance(v, bool) or v is None:
        return math.nan if v is None else float(v)
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan
    except OverflowError:  # an int beyond float's range
        return math.inf


def _floats(cells: Any, wrong: Any) -> Any:
    """``cells`` (a numpy array) as float64, NaN where a cell is ``wrong`` or no number. Text
    goes through numpy's own conversion when every cell is plain (ASCII, no ``_``: what
    Python's ``float`` reads beyond ``_TEXT_NUMBER``), else cell by cell."""
    import numpy as np

    if cells.dtype.kind in "iufb":
        return cells.astype(np.float64)
    if cells.dtype.kind in "US":
        cells = cells.astype(object)
    if cells.dtype != object:
        cells = cells.astype(object)
    joined = _joined_text(cells) if not wrong.any() else None
    if joined is not None:
        if joined.isascii() and "_" not in joined:
            try:
                return cells.astype(np.float64)
            except ValueError:
                pass  # a cell that is no number: cell by cell, it becomes NaN
    out = np.fromiter((_one_float(v) for v in cells), np.float64, len(cells))
    out[wrong] = np.nan
    return out


def _joined_text(cells: Any) -> str | None:
    """Every cell's text joined (None: a cell is not text, or there are none): one C call
    that both checks "all text" and lets the caller look for what numpy reads beyond
    pandas."""
    if cells.dtype != object or not len(cells):
        return None
    try:
        return "".join(cells)
    except TypeError:
        return None


def _is_blank(cells: Any) -> Any:
    """Cells that stand for "not given": None, NaN, pandas' NA, an empty field."""
    import numpy as np

    if cells.dtype.kind == "f":
        return np.isnan(cells)
    if cells.dtype != object:
        return np.zeros(len(cells), dtype=bool)
    if _joined_text(cells) is not None:  # text only: the empty ones
        return cells == ""
    return np.fromiter((v is None or (isinstance(v, float) and v != v)
                        or (isinstance(v, str) and v == "")
                        or type(v).__name__ in ("NAType", "NaTType") for v in cells),
                       bool, len(cells))


def _cells(raw: Any) -> Any:
    """A column as a numpy array: an array as it is, a pandas Series or array by its values
    (extension dtypes as objects), any other sequence as objects."""
    import numpy as np

    if isinstance(raw, np.ndarray):
        return raw
    to_numpy = getattr(raw, "to_numpy", None)
    if to_numpy is not None:  # pandas, only where the caller already has it
        dtype = getattr(raw, "dtype", None)
        return to_numpy() if isinstance(dtype, np.dtype) else to_numpy(dtype=object)
    out = np.empty(len(raw), dtype=object)
    out[:] = list(raw)
    return out


def column(raw: Any, *, integer: bool = False, lo: float | None = None,
           hi: float | None = None, exclusive_lo: bool = False, blank_ok: bool = False,
           text_ok: bool = False) -> Any:
    """A whole column (a numpy array, a pandas Series or a sequence) by the rule of
    ``number``, checked at once and returned as a float64 array (callers cast integers); the
    first bad row raises ``ValueRuleError`` with ``number``'s own message and ``exc.row``
    (0-based). ``blank_ok`` lets NaN / None / an empty field stand for "not given";
    ``text_ok`` reads numbers written as text (a CSV field), which a typed column (a
    DataFrame, JSON) refuses as "3". numpy only: a run reads its trace without pandas."""
    import numpy as np  # here: the scalar rules above are read by modules without numpy

    cells = _cells(raw)
    if cells.dtype == bool:
        wrong = np.ones(len(cells), dtype=bool)
    elif cells.dtype == object and not text_ok:
        wrong = np.fromiter((isinstance(v, bool | str) or not (v is None or isinstance(
            v, int | float | np.integer | np.floating)) for v in cells), bool, len(cells))
    else:
        wrong = np.zeros(len(cells), dtype=bool)
    values = _floats(cells, wrong)
    blank = _is_blank(cells)
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
        given = cells[row]
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
