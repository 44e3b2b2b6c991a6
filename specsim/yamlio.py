"""The project's YAML loader: PyYAML's safe loader with YAML 1.2 / JSON number forms.

PyYAML follows YAML 1.1, where a float needs a dot: ``1e3`` and ``1E-5`` load as the
*strings* '1e3' and '1E-5', so ``rate: 1e3`` would fail as "expected a number, got
'1e3'". ``Loader`` also reads exponent forms without a dot and with an optional exponent
sign (``1e3``, ``1E-5``, ``-2e+3``, ``.5e1``, ``-.5``) as floats. Integers stay integers,
and ``.nan`` / ``.inf`` / ``-.inf`` are still floats, so validation can reject them by key.

It is also the one place YAML is kept small and unambiguous: a mapping naming a key twice
is an error (PyYAML keeps the last silently), and a document whose aliases (``*name``,
``<<: *name``) would add more than ``SPECSIM_MAX_YAML_ALIAS_NODES`` nodes once expanded (an
alias bomb: a few lines, gigabytes when validated or written out) or that holds itself is
refused before anything is built from it.
"""

from __future__ import annotations

import pickle
import re
import threading
from collections import OrderedDict
from typing import Any

import yaml

from specsim import safe_read
from specsim.messages import show

FLOAT_TAG = "tag:yaml.org,2002:float"

FLOAT_RE = re.compile(r"""^(?:
     [-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN)
)$""", re.X)


MERGE_TAG = "tag:yaml.org,2002:merge"


class _Checks:
    """Mapping construction that refuses a key given twice (for every loader below)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _value in node.value:
                if key_node.tag == MERGE_TAG:  # merged keys may be overridden: that is the point
                    continue
                key = self.construct_object(key_node, deep=True)  # type: ignore[attr-defined]
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:  # an unhashable key: SafeConstructor says so itself
                    continue
                if first is not key_node:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {show(key)} (first at line "
                        f"{first.start_mark.line + 1}); give each key once",
                        key_node.start_mark)
        return super().construct_mapping(node, deep)  # type: ignore[misc]


class Loader(_Checks, yaml.SafeLoader):
    """SafeLoader whose float resolver accepts YAML 1.2 / JSON forms such as ``1e3``."""


# Copy the resolver table (it is a class attribute shared with SafeLoader), drop the
# YAML 1.1 float resolver and register ours in its place.
Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != FLOAT_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
for _first in "-+0123456789.":
    # first in the list: "1e3" must not fall through to the int or string resolvers
    Loader.yaml_implicit_resolvers.setdefault(_first, []).insert(0, (FLOAT_TAG, FLOAT_RE))


# Parsed documents by their text. A sweep or a plan reads the same scenario and bundled
# catalogs for every point (validation, then the run): pickle gives each caller its own
# copy (so a caller may change what it got) in a twentieth of a parse.
_PARSED: OrderedDict[tuple[str | bytes, type, int], bytes] = OrderedDict()
_PARSED_MAX = 64
_PARSED_LOCK = threading.Lock()  # a Dask worker may run tasks in threads


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def alias_growth(root: yaml.Node) -> int:
    """The nodes aliases add to a composed document once expanded (0 without aliases).

    An alias is the anchored node object again, so the composed graph stays small while
    its expansion (what validation, a deep copy or JSON output walks) can be 9^9 nodes. A
    scalar weighs one node per started KiB, so an alias to a long string counts too.
    Iterative (no recursion limit); a node that contains itself is a ConstructorError.
    """
    size: dict[int, int] = {}
    state: dict[int, int] = {}  # 1: on the current path, 2: sized
    unique = 0
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            own = 1 + len(node.value) // 1024 if isinstance(node, yaml.ScalarNode) else 1
            unique += own
            size[key] = own + sum(size[id(c)] for c in _children(node))
            state[key] = 2
            continue
        if state.get(key) == 2:
            continue
        if state.get(key) == 1:
            raise yaml.constructor.ConstructorError(
                None, None, "an alias inside the node it refers to (a structure that holds "
                "itself)", node.start_mark)
        state[key] = 1
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node))
    return size[id(root)] - unique


def _parse(text: str | bytes, loader: Any, origin: str, budget: int) -> Any:
    """``yaml.load`` with the alias check between composing and constructing."""
    parser = loader(text)
    try:
        node = parser.get_single_node()
        if node is None:
            return None
        grown = alias_growth(node)
        if grown > budget:
            raise safe_read.too_much(origin, f"YAML aliases expand it by {grown:,} nodes",
                                     safe_read.YAML_ALIAS_NODES)
        return parser.construct_document(node)
    finally:
        parser.dispose()


def _parsed(text: str | bytes, loader: Any, origin: str = "YAML") -> Any:
    budget = safe_read.limit(safe_read.YAML_ALIAS_NODES)
    key = (text, loader, budget)
    with _PARSED_LOCK:
        hit = _PARSED.get(key)
        if hit is not None:
            _PARSED.move_to_end(key)
    if hit is not None:
        return pickle.loads(hit)
    value = _parse(text, loader, origin, budget)
    blob = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    with _PARSED_LOCK:
        _PARSED[key] = blob
        if len(_PARSED) > _PARSED_MAX:
            _PARSED.popitem(last=False)
    return value


def load(text: str | bytes, origin: str = "YAML") -> Any:
    """Parse one YAML document with the project's loader: yaml.YAMLError for bad YAML (a
    duplicate key included), ``safe_read.InputLimitError`` naming ``origin`` for aliases
    over budget."""
    return _parsed(text, Loader, origin)


def problem(exc: yaml.YAMLError | RecursionError) -> str:
    """`` line N: not valid YAML (why)`` for a parse error (after the file's name)."""
    if isinstance(exc, RecursionError):
        return ": not valid YAML (nested too deeply)"
    mark = getattr(exc, "problem_mark", None)
    where = f" line {mark.line + 1}" if mark else ""
    why = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{where}: not valid YAML ({why})"


def load_checked(text: str | bytes, origin: str) -> Any:
    """``load``, a parse error becoming a one-line ``safe_read.InputError`` naming
    ``origin`` and the line."""
    try:
        return load(text, origin)
    except (yaml.YAMLError, RecursionError) as exc:
        raise safe_read.InputError(f"{origin}{problem(exc)}") from None


def load_file(path: Any, what: str, *, noun: str = "file", origin: str | None = None) -> Any:
    """A YAML file read under ``safe_read``'s size cap and parsed by ``load_checked``
    (aliases within budget, no duplicate keys, a parse error one line naming the file)."""
    text = safe_read.read_text(path, what, safe_read.YAML_BYTES, noun=noun)
    return load_checked(text, origin or str(path))


if getattr(yaml, "__with_libyaml__", False):
    class _FastLoader(_Checks, yaml.CSafeLoader):
        """``Loader``'s resolvers over libyaml's parser: the same values, about 10x faster."""

    class _FastSafe(_Checks, yaml.CSafeLoader):
        """libyaml's safe loader (YAML 1.1 numbers), refusing duplicate keys."""

    _FastLoader.yaml_implicit_resolvers = Loader.yaml_implicit_resolvers
else:  # PyYAML built without libyaml
    class _FastSafe(_Checks, yaml.SafeLoader):  # type: ignore[no-redef]
        """PyYAML's safe loader (YAML 1.1 numbers), refusing duplicate keys."""

    _FastLoader = Loader


def load_bundled(text: str | bytes, yaml12: bool = True) -> Any:
    """A bundled data file (catalogs, profiles), parsed by libyaml where PyYAML has it: the
    values ``load`` (``yaml12``) or ``yaml.safe_load`` give, a tenth of a second less per
    run. User files go through ``load``, whose error messages the CLI quotes."""
    return _parsed(text, _FastLoader if yaml12 else _FastSafe)
