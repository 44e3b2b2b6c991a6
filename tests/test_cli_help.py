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


def test_schema_lists_every_built_in_policy_in_a_fresh_process():
    """`specsim schema` in its own interpreter names the registered routers, schedulers,
    preemption orders and speculation policies (it printed empty choices for all of them
    when nothing had imported the modules that register them)."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "specsim.simulator.cli", "schema"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    empty = []

    def walk(node, path):
        if isinstance(node, dict):
            if node.get("enum") == []:
                empty.append(path)
            for k, v in node.items():
                walk(v, f"{path}/{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}[{i}]")

    schema = json.loads(done.stdout)
    walk(schema, "")
    assert not empty, empty
    assert "least_loaded" in json.dumps(schema["$defs"]["Router"])
