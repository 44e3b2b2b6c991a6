"""The key reference of docs/scenario-reference.md, generated from the scenario's JSON Schema.

Why: the schema (`specsim schema`, from the pydantic models in simulator/scenario/schema.py)
is the one truth about which keys exist, their types, defaults and bounds; a reference typed
by hand drifts from it. The page holds this output between two markers and
``tests/test_docs.py`` regenerates it and compares.

    python benchmarks/schema_reference.py            # print the reference
    python benchmarks/schema_reference.py --write    # replace it in docs/scenario-reference.md
    python benchmarks/schema_reference.py --check    # exit 1 if the page differs
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "scenario-reference.md"
START = "<!-- schema-reference:start (python benchmarks/schema_reference.py --write) -->"
END = "<!-- schema-reference:end -->"
BOUNDS = (("minimum", ">= {}"), ("exclusiveMinimum", "> {}"), ("maximum", "<= {}"),
          ("exclusiveMaximum", "< {}"), ("minItems", "at least {} items"),
          ("maxItems", "at most {} items"), ("minLength", "at least {} characters"))


# The modules whose classes register the built-in policy names. A name-valued key's enum
# lists the names registered when the schema is built, so they are imported first: the
# reference must not depend on what else the process happened to import.
REGISTERING = ("specsim.simulator.routing.routers", "specsim.simulator.scheduling.batching",
               "specsim.simulator.speculation.policies", "specsim.simulator.speculation.drafters",
               "specsim.simulator.kv.eviction", "specsim.simulator.kv.radix")


def schema() -> dict[str, Any]:
    """The JSON Schema `specsim schema` prints, with every built-in policy registered."""
    import importlib

    from specsim.simulator.scenario.schema import json_schema

    for name in REGISTERING:
        importlib.import_module(name)
    return json_schema()


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def type_of(prop: dict[str, Any], paths: dict[str, str]) -> str:
    """A property's type in words: a section it points to, a union, an enum, a list."""
    if "$ref" in prop:
        name = _ref_name(prop["$ref"])
        return f"section [`{paths[name]}`](#{anchor(paths[name])})"
    if "const" in prop:
        return f"`{prop['const']}`"
    if "enum" in prop:
        return "one of " + ", ".join(f"`{json.dumps(v)}`" for v in prop["enum"]) if prop[
            "enum"] else "a registered name"
    for union in ("anyOf", "oneOf"):
        if union in prop:
            return " or ".join(dict.fromkeys(type_of(p, paths) for p in prop[union]))
    t = prop.get("type")
    if t == "array":
        items = prop.get("items")
        return "list" + (f" of {type_of(items, paths)}" if items else "")
    if t == "object":
        return "mapping"
    return {"integer": "integer", "number": "number", "string": "string",
            "boolean": "boolean", "null": "null"}.get(t, "any")


def bounds_of(prop: dict[str, Any]) -> str:
    """The numeric and length bounds of a property (and of its union members)."""
    parts = [fmt.format(prop[k]) for k, fmt in BOUNDS if k in prop]
    for union in ("anyOf", "oneOf"):
        for p in prop.get(union, []):
            parts += [fmt.format(p[k]) for k, fmt in BOUNDS if k in p]
    return ", ".join(dict.fromkeys(parts))


def default_of(name: str, prop: dict[str, Any], required: list[str]) -> str:
    if name in required:
        return "required"
    if "default" not in prop:
        return "-"
    return f"`{json.dumps(prop['default'])}`"


def anchor(path: str) -> str:
    """The heading id mkdocs gives `### \\`path\\``: lower case, dots and spaces dropped."""
    return "".join(c for c in path.lower() if c.isalnum() or c in "-_")


def _walk(s: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    """Each section's dotted path (its first place in the tree), in reading order."""
    defs = s["$defs"]
    paths: dict[str, str] = {}
    order: list[str] = []

    def visit(props: dict[str, Any], prefix: str) -> None:
        for key, prop in props.items():
            for ref in _refs(prop):
                name = _ref_name(ref)
                if name in paths:
                    continue
                path = f"{prefix}{key}"
                paths[name] = path
                order.append(name)
                visit(defs[name].get("properties", {}), path + ".")
            for variant in _variants(prop):
                visit(defs[variant].get("properties", {}), f"{prefix}{key}.")

    visit(s["properties"], "")
    return paths, order


def _refs(prop: dict[str, Any]) -> list[str]:
    """The sections a property points to: itself, its union's members, a list's items."""
    if "discriminator" in prop:
        return []
    if "$ref" in prop:
        return [prop["$ref"]]
    members = [p for u in ("anyOf", "oneOf") for p in prop.get(u, [])]
    items = [m["items"] for m in (prop, *members) if isinstance(m.get("items"), dict)]
    return [p["$ref"] for p in (*members, *items) if "$ref" in p]


def _variants(prop: dict[str, Any]) -> list[str]:
    return [_ref_name(r) for r in (prop.get("discriminator") or {}).get("mapping", {}).values()]


def _row(key: str, prop: dict[str, Any], required: list[str], paths: dict[str, str]) -> list[str]:
    return [f"`{key}`", type_of(prop, paths), default_of(key, prop, required),
            bounds_of(prop), _cell(prop.get("description", ""))]


def _table(rows: list[list[str]], head: list[str]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def reference(s: dict[str, Any] | None = None) -> str:
    """The whole reference: the top level, the speculation union, then every section."""
    s = s or schema()
    defs = s["$defs"]
    paths, order = _walk(s)
    head = ["key", "type", "default", "bounds", "meaning"]
    lines = ["### Top level", ""]
    top = []
    for k, p in s["properties"].items():
        if "discriminator" in p:
            by = p["discriminator"]["propertyName"]
            top.append([f"`{k}`", f"section [`{k}`](#{anchor(k)}), by `{by}`", "-", "", ""])
        else:
            top.append(_row(k, p, s.get("required", []), paths))
    lines += _table(top, head)
    for key, prop in s["properties"].items():
        if "discriminator" not in prop:
            continue
        mapping = prop["discriminator"]["mapping"]
        by = prop["discriminator"]["propertyName"]
        lines += ["", f"### `{key}`", "",
                  f"Chosen by `{by}`; the last column "
                  "says which methods take the key.", ""]
        merged: dict[tuple[str, ...], list[str]] = {
            (f"`{by}`", "one of " + ", ".join(f"`{m}`" for m in mapping), "required", "",
             "picks the variant"): list(mapping)}
        for method, ref in mapping.items():
            d = defs[_ref_name(ref)]
            for k, p in d.get("properties", {}).items():
                if k == by:
                    continue
                merged.setdefault(tuple(_row(k, p, d.get("required", []), paths)), []).append(
                    f"`{method}`")
        rows = [[*r, "all" if len(m) == len(mapping) else ", ".join(m)]
                for r, m in merged.items()]
        lines += _table(rows, [*head, "methods"])
    for name in order:
        d = defs[name]
        lines += ["", f"### `{paths[name]}`", ""]
        if d.get("description"):
            lines += [_cell(d["description"]), ""]
        lines += _table([_row(k, p, d.get("required", []), paths)
                         for k, p in d.get("properties", {}).items()], head)
    return "\n".join(lines)


def replace(text: str, new: str) -> str:
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{new}\n{END}{tail}"


def page_reference(text: str) -> str:
    return text.split(START, 1)[1].split(END, 1)[0].strip("\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"replace the reference in {PAGE.name}")
    ap.add_argument("--check", action="store_true", help=f"exit 1 if {PAGE.name} differs")
    args = ap.parse_args(argv)
    new = reference()
    if args.write:
        PAGE.write_text(replace(PAGE.read_text(), new))
    elif args.check:
        if page_reference(PAGE.read_text()) != new:
            print(f"{PAGE.name} differs: run python benchmarks/schema_reference.py --write",
                  file=sys.stderr)
            return 1
    else:
        print(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
