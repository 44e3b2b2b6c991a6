"""The project's YAML loader: PyYAML's safe loader with YAML 1.2 / JSON number forms.

PyYAML follows YAML 1.1, where a float needs a dot: ``1e3`` and ``1E-5`` load as the
*strings* '1e3' and '1E-5', so ``rate: 1e3`` would fail as "expected a number, got
'1e3'". ``Loader`` also reads exponent forms without a dot and with an optional exponent
sign (``1e3``, ``1E-5``, ``-2e+3``, ``.5e1``, ``-.5``) as floats. Integers stay integers,
and ``.nan`` / ``.inf`` / ``-.inf`` are still floats, so validation can reject them by key.
"""

from __future__ import annotations

import pickle
import re
import threading
from collections import OrderedDict
from typing import Any

import yaml

FLOAT_TAG = "tag:yaml.org,2002:float"

FLOAT_RE = re.compile(r"""^(?:
     [-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN)
)$""", re.X)


class Loader(yaml.SafeLoader):
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
_PARSED: OrderedDict[tuple[str | bytes, type], bytes] = OrderedDict()
_PARSED_MAX = 64
_PARSED_LOCK = threading.Lock()  # a Dask worker may run tasks in threads


def _parsed(text: str | bytes, loader: Any) -> Any:
    key = (text, loader)
    with _PARSED_LOCK:
        hit = _PARSED.get(key)
        if hit is not None:
            _PARSED.move_to_end(key)
    if hit is not None:
        return pickle.loads(hit)
    value = yaml.load(text, Loader=loader)  # noqa: S506 (SafeLoader subclasses only)
    blob = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    with _PARSED_LOCK:
        _PARSED[key] = blob
        if len(_PARSED) > _PARSED_MAX:
            _PARSED.popitem(last=False)
    return value


def load(text: str | bytes) -> Any:
    """Parse one YAML document with the project's loader (raises yaml.YAMLError)."""
    return _parsed(text, Loader)


if getattr(yaml, "__with_libyaml__", False):
    class _FastLoader(yaml.CSafeLoader):
        """``Loader``'s resolvers over libyaml's parser: the same values, about 10x faster."""

    _FastLoader.yaml_implicit_resolvers = Loader.yaml_implicit_resolvers
    _FastSafe: Any = yaml.CSafeLoader
else:  # PyYAML built without libyaml
    _FastLoader, _FastSafe = Loader, yaml.SafeLoader


def load_bundled(text: str | bytes, yaml12: bool = True) -> Any:
    """A bundled data file (catalogs, profiles), parsed by libyaml where PyYAML has it: the
    values ``load`` (``yaml12``) or ``yaml.safe_load`` give, a tenth of a second less per
    run. User files go through ``load``, whose error messages the CLI quotes."""
    return _parsed(text, _FastLoader if yaml12 else _FastSafe)
