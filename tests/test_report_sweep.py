"""`specsim report DIR` on a sweep and on a baseline pair; the sweep's plots carry units; the
daily cost table follows effective daily cost = native daily cost / net throughput gain,
from the two runs' own figures."""

from __future__ import annotations

import json
import re

import pytest

from specsim.simulator.cli import main
from specsim.simulator.planning.sweep import run_sweep
from specsim.simulator.planning.sweep_plots import figures
from specsim.simulator.report.report import _num
from tests.conftest import REPO

CHAT = str(REPO / "scenarios" / "chat.yaml")
EVIL = '<script>alert("x")</script> & a|b `c`'
GRID = {"speculation.k": [0, 2], "workload.synthetic.arrival.rate": [2, 6],
        "workload.synthetic.requests": [20], "name": [EVIL]}
PNGS = {"tpot_vs_qps.png", "speedup_heatmap.png", "throughput_vs_tpot.png", "cost_vs_qps.png"}
UNIT = re.compile(r"\([^()]+\)")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "s"
    table = run_sweep(CHAT, GRID, seeds=2, jobs=2, out=out)
    return out, table


def test_sweep_plots_are_written_non_empty_and_their_axes_carry_units(sweep):
    import matplotlib.image as mpimg

    out, table = sweep
    assert PNGS <= set(table.attrs["written"]) and not table.attrs["skipped"]
    for name in PNGS:
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, name
        img = mpimg.imread(out / name)
        assert img.shape[0] > 200 and img.shape[1] > 300 and img[..., :3].std() > 0.05, name
    figs, skipped = figures(table, list(GRID))
    assert {n for n, _ in figs} == PNGS and not skipped
    for name, fig in figs:
        main_ax = fig.axes[0]
        assert main_ax.get_xlabel() and main_ax.get_ylabel(), name
        for ax in fig.axes:  # the colour bar's axis too
            for label in (ax.get_xlabel(), ax.get_ylabel()):
                assert not label or UNIT.search(label), f"{name}: {label!r} has no unit"


def test_sweep_report_escapes_embeds_and_rerenders_the_same(sweep, capsys):
    out, _ = sweep
    md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    for needle in ("# specsim sweep report:", "## What was swept", "`speculation.k`: 0, 2",
                   "calibration profile **H100-SXM**", "USD/device-hour (2026-01)",
                   "TPOT p50 (ms)", "cost (USD / 1M output tokens)"):
        assert needle in md, needle
    assert "<script" not in html and "&lt;script&gt;alert(&quot;x&quot;)" in html
    assert html.count("data:image/png;base64,") == len(PNGS)
    assert not re.search(r'src="(?!data:)', html)  # nothing linked from outside
    # the summary table: a row per point, every row as wide as the header ("|" in a value
    # does not split a cell)
    table = html[html.index("<table>"):html.index("</table>")]
    rows = table.split("<tr>")[1:]
    assert len(rows) == 1 + 4
    assert {r.count("<td") for r in rows[1:]} == {rows[0].count("<th")}
    # `specsim report` re-draws the plots and the same report from the folder's own files
    for name in ("report.md", "report.html", "cost_vs_qps.png"):
        (out / name).unlink()
    assert main(["report", str(out)]) == 0
    assert capsys.readouterr().out.startswith("sweep: wrote ")
    assert (out / "report.md").read_text() == md
    assert (out / "report.html").read_text() == html
    assert (out / "cost_vs_qps.png").is_file()


def test_report_refuses_an_unfinished_sweep_and_other_folders(tmp_path, capsys):
    out = tmp_path / "s"
    run_sweep(CHAT, {"workload.synthetic.requests": [5]}, out=out, plots=False)
    (out / "sweep.csv").unlink()
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unfinished specsim sweep" in err and "--resume" in err
    other = tmp_path / "other"
    other.mkdir()
    (other / "metrics.json").write_text("{}")
    assert main(["report", str(other)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a specsim run output or sweep" in err


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A baseline pair: `specsim run --baseline --out DIR`."""
    out = tmp_path_factory.mktemp("pair") / "run"
    assert main(["run", CHAT, "--out", str(out), "--baseline", "--quiet",
                 "--set", "workload.synthetic.requests=60"]) == 0
    return out


def test_report_on_a_baseline_pair_rerenders_the_comparison(pair, capsys):
    before = (pair / "report.md").read_text()
    for name in ("report.md", "report.html"):
        (pair / name).unlink()
    capsys.readouterr()
    assert main(["report", str(pair)]) == 0
    assert capsys.readouterr().out.startswith("baseline pair: wrote ")
    text = (pair / "report.md").read_text()
    assert text == before
    for needle in ("Speculation against none", "Daily cost for the same daily output volume",
                   "Energy for the same daily output volume"):
        assert needle in text and needle in (pair / "report.html").read_text()


def _row(text: str, label: str) -> list[str]:
    line = next(x for x in text.splitlines() if x.startswith(f"| {label} |"))
    return [c.strip() for c in line.strip().strip("|").split("|")][1:]


def test_cost_table_follows_the_formula_from_the_runs_own_throughput(pair):
    from specsim import run_scenario

    m = json.loads((pair / "metrics.json").read_text())
    run, fleet = m["baseline"]["run"], m["baseline"]["fleet"]
    # the figures are the two runs' own: the speculative run's, and speculation off's
    tput = run["throughput_output_tokens_per_s"]
    assert tput["speculative"] == m["throughput_output_tokens_per_s"]
    off = run_scenario(CHAT, overrides={"workload.synthetic.requests": 60,
                                        "speculation.method": "none"}).metrics
    assert tput["baseline"] == off["throughput_output_tokens_per_s"]
    assert run["busy_fraction"]["baseline"] == off["busy_fraction"]

    def capacity(side: str) -> float:  # output tokens per busy device-second
        return tput[side] / (run["busy_fraction"][side] * fleet["devices"])

    gain = capacity("speculative") / capacity("baseline")
    volume = tput["speculative"] * 86400.0  # the run's daily output volume
    native = volume / capacity("baseline") / 3600.0 * fleet["price_usd_per_device_hour"]
    effective = native / gain  # effective daily cost = native daily cost / net gain
    text = (pair / "report.md").read_text()
    assert _row(text, "output tokens per busy device-second, this load") == [
        _num(capacity("baseline")), _num(capacity("speculative"))]
    assert _row(text, "net throughput gain") == ["1.00x", f"{_num(gain)}x"]
    assert _row(text, "daily cost (USD)") == [_num(native), _num(effective)]
    assert f"({_num(volume / 1e6)} M output tokens/day" in text
    # and the printed numbers keep the formula
    n, e = (float(x.replace(",", "")) for x in _row(text, "daily cost (USD)"))
    g = float(_row(text, "net throughput gain")[1].rstrip("x"))
    assert e == pytest.approx(n / g, rel=0.01)
    energy = run["energy_j_per_output_token"]
    assert _row(text, "energy per day (kWh)") == [_num(energy["baseline"] * volume / 3.6e6),
                                                  _num(energy["speculative"] * volume / 3.6e6)]
