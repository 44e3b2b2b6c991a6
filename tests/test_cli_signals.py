"""The CLI's last line of defence (issue 24): a signal that lands inside compiled code, and
a progress bar that must not add a line to an error."""

from __future__ import annotations

import contextlib
import io

import pytest

from specsim.outputs import Terminated
from specsim.simulator.cli import main
from tests.conftest import REPO

CHAT = str(REPO / "scenarios" / "chat_nospec.yaml")


def _main(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(argv)
    return rc, err.getvalue()


@pytest.mark.parametrize("signalled, rc, line", [(Terminated, 143, "specsim: terminated"),
                                                 (KeyboardInterrupt, 130,
                                                  "specsim: interrupted")])
def test_a_signal_inside_compiled_code_is_one_line_and_cleans_up(tmp_path, monkeypatch,
                                                                 signalled, rc, line):
    import specsim.simulator.cluster.engine as engine

    def killed(*a, **k):  # numba calling back into Python as the signal's handler raises
        try:
            raise signalled()
        except signalled as exc:
            raise SystemError("CPUDispatcher(<function _commit>) returned a result with an "
                              "exception set") from exc

    monkeypatch.setattr(engine, "run_scenario", killed)
    got, err = _main(["run", CHAT, "--out", str(tmp_path / "out"), "--quiet",
                      "--set", "workload.synthetic.requests=5"])
    assert (got, err) == (rc, line + "\n")
    assert list(tmp_path.iterdir()) == []  # the staging folder went


def test_another_system_error_is_not_taken_for_a_signal(tmp_path, monkeypatch):
    import specsim.simulator.cluster.engine as engine

    def broken(*a, **k):
        raise SystemError("a bug")

    monkeypatch.setattr(engine, "run_scenario", broken)
    with pytest.raises(SystemError, match="a bug"):
        _main(["run", CHAT, "--out", str(tmp_path / "out"), "--quiet"])


def test_an_error_after_the_progress_bar_started_is_still_one_line(tmp_path):
    # without --quiet the bar is built; off a terminal it must not add a blank line
    rc, err = _main(["run", str(REPO / "scenarios" / "chat.yaml"), "--out",
                     str(tmp_path / "out"), "--set", "hardware.count=1000000",
                     "--set", "hardware.tensor_parallel=1"])
    assert rc == 2 and err.count("\n") == 1 and err.startswith("specsim: error: ")
    assert "hardware.count" in err and not (tmp_path / "out").exists()
