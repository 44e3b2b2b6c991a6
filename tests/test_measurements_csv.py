"""``specsim calibrate --from-measurements``: every blank or odd cell is a documented skip or a
one-line error naming the file, line and column (exit 2, never a traceback).

No torch: the measurement fit is numpy/scipy only.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from specsim.cost_models.calibrate.fit import (
    calibration_of,
    fit_from_measurements,
    read_measurements,
)
from specsim.cost_models.catalog import get_hardware, get_model, get_precision
from specsim.cost_models.errors import CatalogError
from specsim.cost_models.roofline import ForwardCostModel, attention_area

HEADER = "model,hardware,tensor_parallel,batch_size,prompt_len,prefill_ms,decode_ms_per_token"
TRUE = (0.62, 0.74, 25e-6, 400e-6)


def _rows(n_batch=(1, 8, 32), n_plen=(128, 1024)) -> list[str]:
    """Exact roofline timings of Llama-3.1-8B on one H100 (so every fit converges)."""
    cm = ForwardCostModel(get_model("Llama-3.1-8B"), get_hardware("H100-SXM"), 1,
                          get_precision({}, "q"), calibration_of(TRUE))
    out = []
    for b in n_batch:
        for plen in n_plen:
            pre = cm.time(b * plen, b * attention_area(plen, 0), 0.0, b) * 1e3
            dec = cm.time(b, b * (plen + 1), b * plen, b) * 1e3
            out.append(f"Llama-3.1-8B,H100-SXM,1,{b},{plen},{pre:.6f},{dec:.6f}")
    return out


GOOD = _rows()


def _write(tmp_path, text: str | bytes, name: str = "m.csv"):
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text, newline="")
    return p


def _csv(*lines: str, header: str = HEADER, end: str = "\n") -> str:
    return end.join([header, *lines]) + end


# ---------------------------------------------------------------- documented skips


def test_blank_decode_cell_among_full_rows_gives_only_the_prefill_pass(tmp_path):
    """The crash: a blank cell next to numbers became NaN and reached the optimiser."""
    row = GOOD[0].rsplit(",", 1)[0] + ","  # decode_ms_per_token blank
    res, prof = fit_from_measurements(_write(tmp_path, _csv(*GOOD[1:], row)))
    assert res.train["points"] == 2 * len(GOOD) - 1
    assert prof["passes"] == {"prefill": len(GOOD), "decode": len(GOOD) - 1}
    assert prof["rows_with_one_pass"] == 1
    assert res.values["eta_compute"] == pytest.approx(TRUE[0], rel=1e-3)


def test_blank_prefill_cell_gives_only_the_decode_pass(tmp_path):
    cells = GOOD[0].split(",")
    cells[5] = ""
    res, prof = fit_from_measurements(_write(tmp_path, _csv(*GOOD[1:], ",".join(cells))))
    assert prof["passes"] == {"prefill": len(GOOD) - 1, "decode": len(GOOD)}
    assert res.train["median_ape_pct"] < 0.1


def test_whitespace_cells_are_blank_and_values_are_stripped(tmp_path):
    cells = GOOD[0].split(",")
    cells[6] = "   "  # only spaces: blank
    spaced = " , ".join(GOOD[1].split(","))  # spaces around every value
    tabbed = "\t" + GOOD[2].replace(",", ",\t")
    df = read_measurements(_write(tmp_path, _csv(",".join(cells), spaced, tabbed, *GOOD[3:])))
    assert np.isnan(df.loc[0, "decode_ms_per_token"])
    assert df.loc[1, "model"] == "Llama-3.1-8B" and df.loc[1, "batch_size"] == 1
    assert df.loc[2, "hardware"] == "H100-SXM"


def test_blank_optional_cells_take_their_defaults(tmp_path):
    header = HEADER + ",output_len,weights,activations,kv_cache"
    rows = [GOOD[0] + ",,,,", GOOD[1] + ",64,bf16,,", GOOD[2] + ",0,fp8, , "]
    df = read_measurements(_write(tmp_path, _csv(*rows, header=header)))
    assert list(df["output_len"]) == [0, 64, 0]
    assert list(df["weights"]) == ["bf16", "bf16", "fp8"]
    assert set(df["activations"]) == {"bf16"} and set(df["kv_cache"]) == {"bf16"}


def test_blank_lines_and_rows_of_only_commas_are_skipped_and_lines_still_count(tmp_path):
    text = _csv(GOOD[0], "", ",,,,,,", "   ", GOOD[1], ",,,", "Llama-3.1-8B,H100-SXM,1,8,abc,1,1",
                "", "")
    with pytest.raises(CatalogError, match=r"line 8: prompt_len: expected an integer, got 'abc'"):
        read_measurements(_write(tmp_path, text))
    ok = _csv(*GOOD, "", ",,,,,,", "", "  ")
    assert len(read_measurements(_write(tmp_path, ok))) == len(GOOD)


@pytest.mark.parametrize("end", ["\r\n", "\r"])
def test_windows_and_old_mac_line_endings(tmp_path, end):
    df = read_measurements(_write(tmp_path, _csv(*GOOD, end=end)))
    assert len(df) == len(GOOD) and list(df["line"]) == list(range(2, 2 + len(GOOD)))


def test_byte_order_mark_is_not_part_of_the_first_column(tmp_path):
    p = _write(tmp_path, b"\xef\xbb\xbf" + _csv(*GOOD).encode())
    res, _ = fit_from_measurements(p)
    assert res.train["points"] == 2 * len(GOOD)


def test_trailing_commas_past_the_header_and_unnamed_blank_columns(tmp_path):
    rows = [r + ",," for r in GOOD]
    assert len(read_measurements(_write(tmp_path, _csv(*rows)))) == len(GOOD)
    rows = [r + "," for r in GOOD]
    assert len(read_measurements(_write(tmp_path, _csv(*rows, header=HEADER + ",")))) == len(GOOD)


def test_quoted_cells_and_output_len_zero(tmp_path):
    cells = GOOD[0].split(",")
    row = ",".join(f'"{c}"' for c in cells) + ',"0"'
    df = read_measurements(_write(tmp_path, _csv(row, header=HEADER + ",output_len")))
    assert df.loc[0, "output_len"] == 0 and df.loc[0, "model"] == "Llama-3.1-8B"


# ---------------------------------------------------------------- one-line errors


BAD_ROWS = [
    # (row 2 of the file, the message's distinctive part)
    ("Llama-3.1-8B,H100-SXM,,8,128,10,2",
     "line 2: tensor_parallel: expected an integer, got a blank cell"),
    ("Llama-3.1-8B,H100-SXM,1, ,128,10,2",
     "line 2: batch_size: expected an integer, got a blank cell"),
    (",H100-SXM,1,8,128,10,2", "line 2: model: expected a catalog model name, got a blank cell"),
    ("Llama-3.1-8B,,1,8,128,10,2",
     "line 2: hardware: expected a catalog accelerator name, got a blank cell"),
    ("Llama-3.1-8B,H100-SXM,1,8,128,,", "line 2: expected prefill_ms or decode_ms_per_token"),
    ("Llama-3.1-8B,H100-SXM,1,8,128, , ", "line 2: expected prefill_ms or decode_ms_per_token"),
    ("Llama-3.1-8B,H100-SXM,1,8,128,NaN,2",
     "line 2: prefill_ms: expected a finite number, got nan (leave the "
     "cell blank to skip it)"),
    ("Llama-3.1-8B,H100-SXM,1,8,128,10,nan", "line 2: decode_ms_per_token: expected a finite number, got nan"),
    ("Llama-3.1-8B,H100-SXM,1,8,128,inf,2", "line 2: prefill_ms: expected a finite number, got inf"),
    ("Llama-3.1-8B,H100-SXM,1,8,128,10,-1", "line 2: decode_ms_per_token: expected a number greater than 0, got -1"),
    ("Llama-3.1-8B,H100-SXM,1,8,128,0,2", "line 2: prefill_ms: expected a number greater than 0, got 0"),
    ("Llama-3.1-8B,H100-SXM,1,8,2.5,10,2", "line 2: prompt_len: expected an integer, got 2.5"),
    ("Llama-3.1-8B,H100-SXM,1,8,1e300,10,2", "prompt_len: expected an integer at most "
                                             "9007199254740992, got 1e+300"),
    ("Llama-3.1-8B,H100-SXM,1,8,128,10", "line 2: decode_ms_per_token: missing (the row has "
                                         "6 cells, the header 7"),
    ("Llama-3.1-8B,H100-SXM,1,8,128,10,2,9", "line 2: 8 cells, but the header has 7 columns "
                                             "(extra value '9')"),
    ('"Llama-3.1-8B,H100-SXM,1,8,128,10,2', "line 2: not valid CSV (unexpected end of data)"),
    ("Llama-3.1-8B,H100-SXM,1,8,128,10,2x", "line 2: decode_ms_per_token: expected a number, "
                                            "got '2x'"),
    ("NoSuchModel,H100-SXM,1,8,128,10,2", "line 2: model: unknown model 'NoSuchModel'"),
    ("Llama-3.1-8B,NoSuchChip,1,8,128,10,2", "line 2: hardware: unknown accelerator"),
]


@pytest.mark.parametrize("row,needle", BAD_ROWS)
def test_bad_cell_is_a_one_line_error_naming_line_and_column(tmp_path, row, needle):
    p = _write(tmp_path, _csv(row, *GOOD))
    with pytest.raises(CatalogError) as exc:
        fit_from_measurements(p)
    msg = str(exc.value)
    assert needle in msg and "\n" not in msg and msg.startswith(str(p))


@pytest.mark.parametrize("header,rows,needle", [
    (HEADER + ",output_len", [GOOD[0] + ",-4"], "line 2: output_len: expected an integer at "
                                                 "least 0, got -4"),
    (HEADER + ",weights", [GOOD[0] + ",bogus"], "line 2: weights: unknown quantization format "
                                                 "'bogus'"),
    (HEADER.replace(",", ";"), [r.replace(",", ";") for r in GOOD],
     "line 1: the header is separated by ';'; expected comma-separated columns"),
    (HEADER + ",model", [r + ",x" for r in GOOD], "line 1: column 'model' appears twice"),
    (HEADER + ",", [GOOD[0] + ",7"], "line 2: column 8: value '7' under a column with no "
                                     "header name"),
    (GOOD[0], GOOD[1:], "missing column 'model' (the first line must be the header"),
    (HEADER, [], "no measurement rows (only a header)"),
])
def test_bad_header_or_optional_column(tmp_path, header, rows, needle):
    with pytest.raises(CatalogError) as exc:
        read_measurements(_write(tmp_path, _csv(*rows, header=header)))
    assert needle in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("content", [b"", b"\n\n  \n", b"\xef\xbb\xbf", b",,,\n,,\n"])
def test_empty_files(tmp_path, content):
    with pytest.raises(CatalogError, match="empty file: expected a header line"):
        read_measurements(_write(tmp_path, content))


def test_not_utf8_and_a_directory(tmp_path):
    with pytest.raises(CatalogError, match=r"not a UTF-8 text file \(byte 2"):
        read_measurements(_write(tmp_path, b"mo\xffdel\n"))
    with pytest.raises(CatalogError, match="is a directory"):
        read_measurements(tmp_path)


# ---------------------------------------------------------------- the command line


CLI_CASES = [
    _csv("Llama-3.1-8B,H100-SXM,,8,128,10,2", *GOOD),
    _csv(*GOOD, "Llama-3.1-8B,H100-SXM,1,8,128,NaN,2"),
    _csv(*GOOD, "Llama-3.1-8B,H100-SXM,1,8,128,10"),
    _csv(*GOOD, '"oops'),
    "",
]


@pytest.mark.parametrize("text", CLI_CASES)
def test_cli_bad_csv_exits_2_with_one_line(tmp_path, capsys, text):
    from specsim.simulator.cli import main

    p = _write(tmp_path, text)
    assert main(["calibrate", "--from-measurements", str(p), "--out",
                 str(tmp_path / "o.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"specsim: error: {p}")
    assert not (tmp_path / "o.yaml").exists()


def test_cli_blank_cells_fit_and_say_so(tmp_path, capsys):
    from specsim.simulator.cli import main

    row = GOOD[0].rsplit(",", 1)[0] + ","
    p = _write(tmp_path, _csv(*GOOD[1:], row, ",,,,,,", ""))
    out = tmp_path / "o.yaml"
    assert main(["calibrate", "--from-measurements", str(p), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "1 of 6 rows gave one pass" in text and out.is_file()
    assert main(["calibrate", "--from-measurements", str(p), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err  # a folder is no file to write the profile to
    assert len(err.splitlines()) == 1 and "is a folder; give a file name" in err, err


def test_real_process_prints_no_traceback(tmp_path):
    """The installed entry point end to end (the crash printed a scipy traceback)."""
    p = _write(tmp_path, _csv(*GOOD, "Llama-3.1-8B,H100-SXM,1,8,128,10"))
    proc = subprocess.run([sys.executable, "-m", "specsim.simulator.cli", "calibrate",
                           "--from-measurements", str(p), "--out", str(tmp_path / "o.yaml")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_fit_module_imports_without_torch():
    code = ("import sys; sys.modules['torch'] = None; "
            "import specsim.cost_models.calibrate.fit as f; "
            "assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]; "
            "print(f.ATTENTION)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "eta_attn_prefill"
