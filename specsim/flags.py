"""Numeric command-line flags checked like scenario keys: one line naming the flag, exit 2.

argparse calls these as ``type=`` converters, so a bad value is refused while the command
line is read, before any file is opened; ``OneLineParser`` prints that refusal as one
line like every user error (``specsim: error: argument --tolerance: expected ... (see
specsim plan --help)``) instead of the usage block followed by the error. Only the standard library is imported: ``specsim --help``
stays light.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable

#: bisection tolerance of ``specsim plan``: below 0.001 the bracket stops shrinking in
#: floating point before it is within the ratio (an endless loop); above 1 the answer is
#: off by more than 2x
TOLERANCE_RANGE = (0.001, 1.0)


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line and exit 2 (as every user error);
    sub-commands made from it are OneLineParsers too."""

    def error(self, message: str) -> None:  # type: ignore[override]
        message = " ".join(str(message).split())
        sys.stderr.write(f"specsim: error: {message} (see {self.prog} --help)\n")
        sys.exit(2)


def _shown(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


def integer(low: int | None = None, high: int | None = None, *,
            what: str = "an integer") -> Callable[[str], int]:
    """A converter for an integer flag within [low, high] (None: unbounded)."""

    def convert(text: str) -> int:
        try:
            value = int(text.strip().replace("_", ""), 10)
        except ValueError:
            value = None
        if value is None or (low is not None and value < low) or (
                high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected {what}{_range(low, high)}, got "
                                             f"{_shown(text)}")
        return value

    convert.__name__ = "integer"
    return convert


def number(low: float | None = None, high: float | None = None, *, low_open: bool = False,
           what: str = "a number") -> Callable[[str], float]:
    """A converter for a finite float flag within [low, high] (``low_open``: above low)."""

    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        bad = not math.isfinite(value) or (
            low is not None and (value <= low if low_open else value < low)) or (
            high is not None and value > high)
        if bad:
            raise argparse.ArgumentTypeError(
                f"expected {what}{_range(low, high, low_open)}, got {_shown(text)}")
        return value

    convert.__name__ = "number"
    return convert


def _range(low: float | None, high: float | None, low_open: bool = False) -> str:
    def fmt(x: float) -> str:
        return f"{x:,}" if isinstance(x, int) else f"{x:g}"

    if low is not None and high is not None:
        return f" from {fmt(low)} to {fmt(high)}" if not low_open else \
            f" above {fmt(low)} and at most {fmt(high)}"
    if low is not None:
        return f" above {fmt(low)}" if low_open else f" at least {fmt(low)}"
    if high is not None:
        return f" at most {fmt(high)}"
    return ""


#: the flags shared by several commands, each rule written once
positive_int = integer(1)
non_negative_int = integer(0)
seed = integer(0, 2**63 - 1, what="a seed (an integer)")
positive_seconds = number(0.0, low_open=True, what="a number of seconds")
positive_rate = number(0.0, low_open=True, what="a rate in requests per second")
tolerance = number(*TOLERANCE_RANGE, what="a ratio")
