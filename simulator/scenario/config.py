"""Scenario files: read, apply ``--set`` overrides, validate into the typed ``Scenario``.

The schema itself lives in ``schema.py`` (pydantic); this module reads files (one-line
errors for anything unreadable), applies dotted overrides before validation so they pass
the same checks, and holds the rules that involve two keys.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from specsim import yamlio
from specsim.errors import ScenarioError
from specsim.simulator.scenario import schema
from specsim.simulator.scenario.schema import Scenario, show


def validate(data: Any) -> Scenario:
    """The typed scenario (``schema.Scenario``), or a one-line ScenarioError."""
    return schema.validate(data)


def check_consistency(sc: Scenario) -> None:
    """Rules that involve two keys of a validated scenario."""
    spec, sched = sc.speculation, sc.scheduler
    k = spec.k
    if spec.method != "none" and spec.policy != "off" and sched.token_budget < k + 1:
        # a decode step verifies k drafts plus one token: a smaller budget would silently
        # shrink every draft (speculation off in effect)
        raise ScenarioError(f"scheduler.token_budget: expected at least speculation.k + 1 = "
                            f"{k + 1} (a decode step verifies k drafted tokens plus one), got "
                            f"{sched.token_budget}; raise it or lower speculation.k")


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (["a", "b", "c"], YAML-parsed value)."""
    shown = text if text.isprintable() and len(text) <= 80 else show(text, 80)
    if "=" not in text:
        raise ScenarioError(f"--set {shown}: expected key.path=value")
    key, raw = text.split("=", 1)
    parts = [p for p in key.strip().split(".")]
    if not all(parts):
        raise ScenarioError(f"--set {shown}: expected a dotted key path like speculation.k")
    try:
        value = yamlio.load(raw, f"--set {key.strip()}") if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    return parts, value


def apply_overrides(data: dict[str, Any], overrides: list[str] | dict[str, Any] | None
                    ) -> dict[str, Any]:
    """Set dotted keys in a raw scenario dict (before validation, so the same checks apply)."""
    data = copy.deepcopy(data)
    if not overrides:
        return data
    items = (overrides.items() if isinstance(overrides, dict)
             else (parse_override(o) for o in overrides))
    for key, value in items:
        parts = key.split(".") if isinstance(key, str) else key
        node = data
        for i, p in enumerate(parts[:-1]):
            nxt = node.get(p)
            if nxt is None or isinstance(nxt, str):
                # a catalog name replaced by a partial inline mapping makes no sense; start fresh
                nxt = {}
                node[p] = nxt
            elif not isinstance(nxt, dict):
                dotted = ".".join(map(str, parts))
                if not dotted.isprintable():
                    dotted = show(dotted)
                raise ScenarioError(f"--set {dotted}: {'.'.join(map(str, parts[: i + 1]))} is "
                                    f"not a mapping")
            node = nxt
        node[parts[-1]] = value
    return data


def read_yaml(path: Path) -> dict[str, Any]:
    """A scenario file's top-level mapping, read by ``specsim.safe_read`` (size cap, alias
    budget, no duplicate keys; the project loader: ``1e3`` is a number)."""
    path = Path(path)
    data = yamlio.load_file(path, "a YAML scenario", noun="scenario file")
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: expected a mapping of scenario keys at the top level")
    return data
