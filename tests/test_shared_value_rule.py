"""One number rule for every file specsim reads (#22 part 3): the same bad values fed to a
scenario key, a catalog entry, a trace column, an acceptance profile and a calibration
profile give the same one-line wording (``specsim.values``), each naming its file and key."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import yaml

from specsim import values
from specsim.cost_models.calibration import profile_from_dict
from specsim.cost_models.catalog import get_hardware, hardware_catalog
from specsim.simulator.cli import main
from specsim.simulator.speculation.acceptance import parse_profile
from specsim.traces.schema import validate_trace
from tests.conftest import REPO

CHAT = REPO / "scenarios" / "chat.yaml"

# value -> what every reader says about it; {hi} is the key's own upper bound
BAD = [
    (math.nan, "expected a finite number, got nan"),
    (math.inf, "expected a finite number, got inf"),
    (-1, "expected a number at least 0, got -1"),
    ("3", "expected a number, got '3'"),
    (1e300, "expected a number at most {hi}, got 1e+300"),
]


def _scenario(value, tmp_path, capsys) -> str:
    data = yaml.safe_load(CHAT.read_text())
    data["engine"] = {"output_delay_s": value}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["validate", str(path)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def _catalog(value, tmp_path, capsys) -> str:
    entry = {**hardware_catalog()["H100-SXM"], "price_usd_per_hour": value, "name": "mine"}
    with pytest.raises(ValueError) as info:
        get_hardware(entry)
    return str(info.value)


def _trace(value, tmp_path, capsys) -> str:
    df = pd.DataFrame({"arrival_s": [0, value], "prompt_tokens": [1, 1],
                       "output_tokens": [1, 1]})
    with pytest.raises(ValueError) as info:
        validate_trace(df, "mine.csv")
    return str(info.value)


def _acceptance(value, tmp_path, capsys) -> str:
    entry = {"temperature": value, "classes": {"default": {"alpha": 0.7}}}
    with pytest.raises(ValueError) as info:
        parse_profile("p", entry, "mine.yaml: p")
    return str(info.value)


def _calibration(value, tmp_path, capsys) -> str:
    fitted = {"eta_compute": 0.5, "eta_memory": 0.8, "per_layer_overhead_s": value,
              "fixed_overhead_s": 0.0}
    with pytest.raises(ValueError) as info:
        profile_from_dict({"fitted": fitted}, "mine.yaml")
    return str(info.value)


# reader, the key its message names, the key's upper bound
PLACES = [
    (_scenario, "engine.output_delay_s", 10.0),
    (_catalog, "hardware.accelerator.price_usd_per_hour", 1e15),
    (_trace, "mine.csv row 1: arrival_s", 1e8),
    (_acceptance, "mine.yaml: p.temperature", 10.0),
    (_calibration, "mine.yaml: fitted.per_layer_overhead_s", 1e15),
]


@pytest.mark.parametrize("value,expected", BAD, ids=["nan", "inf", "negative", "text", "huge"])
@pytest.mark.parametrize("read,key,hi", PLACES, ids=[p[0].__name__[1:] for p in PLACES])
def test_the_same_bad_value_reads_the_same_everywhere(read, key, hi, value, expected,
                                                      tmp_path, capsys):
    message = read(value, tmp_path, capsys)
    want = f"{key}: " + expected.format(hi=values.bound_text(hi))
    assert "\n" not in message
    assert message.endswith(want), message
