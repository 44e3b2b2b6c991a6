"""report.html is self-contained and escapes every user string; `specsim report DIR`
rewrites the report of a run folder identically; --baseline adds the product tables."""

from __future__ import annotations

import json
import re

from specsim.simulator.cli import main
from specsim.simulator.report.html import markdown_to_html
from tests.conftest import REPO

CHAT = str(REPO / "scenarios" / "chat.yaml")
SMALL = ["--set", "workload.synthetic.requests=60", "--quiet"]


def test_html_escapes_user_strings_and_embeds_plots(tmp_path):
    out = tmp_path / "run"
    evil = '<script>alert("x")</script> & <b>'
    assert main(["run", CHAT, "--out", str(out), *SMALL, "--set", f"name={json.dumps(evil)}"]) == 0
    html = (out / "report.html").read_text()
    assert "<script" not in html and "&lt;script&gt;" in html
    pngs = {p.name for p in out.glob("*.png")}
    assert html.count("data:image/png;base64,") == len(pngs) > 0
    assert not re.search(r'src="(?!data:)', html)  # nothing linked from outside


def test_markdown_subset():
    md = "# T\n\n| a | b |\n| :--- | ---: |\n| x | **1** |\n\n- one\n- two\n\n> warn _this_\n"
    html = markdown_to_html(md, REPO)
    assert "<h1>T</h1>" in html and '<td class="r"><strong>1</strong></td>' in html
    assert "<ul><li>one</li><li>two</li></ul>" in html
    assert "<blockquote>warn <em>this</em></blockquote>" in html


def test_report_command_rewrites_the_same_report(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", CHAT, "--out", str(out), *SMALL]) == 0
    before = (out / "report.md").read_text()
    (out / "report.md").unlink()
    (out / "latency_cdf.png").unlink()
    assert main(["report", str(out)]) == 0
    assert (out / "report.md").read_text() == before
    assert (out / "latency_cdf.png").is_file()
    assert main(["report", str(tmp_path)]) == 2
    assert "not a specsim run output" in capsys.readouterr().err


def test_baseline_report_has_the_product_tables(tmp_path):
    out = tmp_path / "run"
    assert main(["run", CHAT, "--out", str(out), "--baseline", *SMALL]) == 0
    text = (out / "report.md").read_text()
    for needle in ("Speculation against none", "TPOT ms: none -> spec",
                   "Daily cost for the same daily output volume", "net throughput gain",
                   "Energy for the same daily output volume", "energy per day (kWh)",
                   "USD/device-hour (2026-01)"):
        assert needle in text, needle
