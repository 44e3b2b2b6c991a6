"""The command line explains itself: --version, an example in --help, help on every positional."""

from __future__ import annotations

import argparse

import pytest

from specsim.simulator.cli import build_parser, main


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("specsim ")


def test_help_shows_an_example_and_points_at_scenarios(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "example: specsim run scenarios/chat.yaml" in out and "scenarios/" in out


def _parsers(p: argparse.ArgumentParser):
    yield p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_every_positional_argument_has_help():
    missing = [f"{p.prog} {a.dest}" for p in _parsers(build_parser()) for a in p._actions
               if not a.option_strings and not isinstance(a, argparse._SubParsersAction)
               and not a.help]
    assert not missing
