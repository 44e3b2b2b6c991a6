"""One number rule for every file specsim reads (#22 part 3): the same bad values fed to a
scenario key, a catalog entry, a trace column, an acceptance profile and a calibration
profile give the same one-line wording (``specsim.values``), each naming its file and key."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import yaml

from specsim import values
from specsim.cost_models.calibrate.fit import read_measurements
from specsim.cost_models.calibration import profile_from_dict
from specsim.cost_models.catalog import get_hardware, hardware_catalog
from specsim.simulator.cli import main
from specsim.simulator.speculation.acceptance import parse_profile
from specsim.traces.loaders import load_trace
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


# the text files: a trace CSV (its integer column) and calibrate's measurements CSV (a
# positive time); a number written as text is read, so only the typed values differ
def _trace_csv(cell: str, tmp_path) -> str:
    path = tmp_path / "t.csv"
    path.write_text(f"arrival_s,prompt_tokens,output_tokens\n0,5,{cell}\n")
    with pytest.raises(ValueError) as info:
        load_trace(path)
    return str(info.value)


def _measurements_csv(cell: str, tmp_path) -> str:
    path = tmp_path / "m.csv"
    path.write_text("model,hardware,tensor_parallel,batch_size,prompt_len,prefill_ms,"
                    f"decode_ms_per_token\nLlama-3.1-8B,H100-SXM,1,8,128,10,{cell}\n")
    with pytest.raises(ValueError) as info:
        read_measurements(path)
    return str(info.value)


CELLS = [
    ("nan", "expected a finite number, got nan"),
    ("inf", "expected a finite number, got inf"),
    ("-1", "expected {what} {rel} 0, got -1"),
    ("1e300", "expected {what} at most {hi}, got 1e+300"),
]
TEXT_PLACES = [  # reader, the key its message names, the rule's words, its upper bound
    (_trace_csv, "line 2: output_tokens", "an integer", "at least", 2**53),
    (_measurements_csv, "line 2: decode_ms_per_token", "a number", "greater than", None),
]


@pytest.mark.parametrize("read,key,what,rel,hi,cell,expected", [
    (*place, *bad) for place in TEXT_PLACES for bad in CELLS
    if not (place[4] is None and bad[0] == "1e300")])  # a measured time has no upper bound
def test_text_files_read_the_same(read, key, what, rel, hi, cell, expected, tmp_path):
    message = read(cell, tmp_path)
    want = f"{key}: " + expected.format(what=what, rel=rel, hi=hi)
    assert "\n" not in message
    assert want in message, message  # (calibrate adds a hint: leave the cell blank)
