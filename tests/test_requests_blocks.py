"""requests.csv a block at a time (issue 22's memory target): the blocks are the table's
rows in order, the file is byte for byte the one written from the whole table, the table is
built only when read, and the text columns share one string per distinct value."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest

from specsim.outputs import escape_frame
from specsim.simulator.cluster.engine import run_scenario
from specsim.simulator.cluster.requests import _text_column
from specsim.simulator.metrics.iteration_log import write_csv
from tests.test_report import _trace


@pytest.fixture(scope="module")
def runs():
    sc = {"model": "Llama-3.1-8B", "hardware": {"accelerator": "H100-SXM", "count": 2},
          "speculation": {"method": "none"}, "workload": {},
          "simulation": {"progress": False}}
    return run_scenario(sc, trace=_trace(300, classes=("chat", "code")))


def test_blocks_are_the_table_in_order_and_write_the_same_bytes(runs):
    blocks = list(runs.requests_blocks(64))  # columns by name (numpy arrays): no frame
    assert all(isinstance(c, np.ndarray) for b in blocks for c in b.values())
    assert [len(b["request_id"]) for b in blocks] == [64, 64, 64, 64, 44]
    whole = runs.requests  # built now, from the same builder
    assert pd.concat([pd.DataFrame(b) for b in blocks], ignore_index=True).equals(whole)
    a, b = io.StringIO(), io.StringIO()
    write_csv(escape_frame(whole), a)
    for i, block in enumerate(runs.requests_blocks(64)):  # (now from the built table)
        write_csv(escape_frame(block), b, header=i == 0)
    assert a.getvalue() == b.getvalue()


def test_the_table_is_built_when_first_read():
    sc = {"model": "Llama-3.1-8B", "hardware": {"accelerator": "H100-SXM", "count": 1},
          "speculation": {"method": "none"}, "workload": {},
          "simulation": {"progress": False}}
    r = run_scenario(sc, trace=_trace(20))
    assert callable(object.__getattribute__(r, "requests"))  # not built by the run
    assert sum(len(b["request_id"]) for b in r.requests_blocks(7)) == 20
    assert callable(object.__getattribute__(r, "requests"))  # blocks did not build it
    assert isinstance(r.requests, pd.DataFrame) and len(r.requests) == 20
    assert isinstance(object.__getattribute__(r, "requests"), pd.DataFrame)  # kept


def test_text_columns_share_one_string_per_value():
    col = pd.Series(np.array(["chat", "code"] * 500), dtype=object).astype(str)
    out = _text_column(col)
    assert list(out) == list(col.astype(str).to_numpy(object))
    assert len({id(v) for v in out}) == 2
