"""One registry per policy axis: a policy registers by name, a scenario picks it by name.

    from specsim.simulator.registry import ROUTERS

    @ROUTERS.register("my_router")
    class MyRouter(Router): ...

Registering from anywhere (a test, a notebook, a plug-in module) is enough for a scenario
that names it to find it; nothing in the library changes. A drafter registers with what
the scenario schema and the engine-config mapping need to know about it (``DrafterInfo``),
so the schema's ``speculation.method`` choices, each method's own keys, the vLLM / SGLang
names that map onto it and the drafter-precision rule all come from its one registration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specsim.errors import ScenarioError


@dataclass(frozen=True)
class DrafterInfo:
    """What a drafter declares when it registers (``DRAFTERS.register(name, ...)``).

    ``params``: a pydantic model (a ``Section``) whose fields are the method's own keys in
    ``speculation`` (e.g. ``ngram: {match_rate, cpu_s_per_step}``); None: the shared keys
    only. ``tree``: it may draft a tree (``speculation.tree``). ``has_weights``: its drafter
    is a network whose weight precision (``speculation.drafter_quantization``) scales
    acceptance. ``draft_model``: an engine's draft-model id names a separate model to load
    as ``speculation.drafter`` (else the id is only recorded: a head derived from the
    target). ``vllm`` / ``sglang``: the vLLM ``--speculative-config`` methods and SGLang
    ``--speculative-algorithm`` values that mean this drafter. ``doc``: the method's line in
    the scenario's JSON Schema (``specsim schema``).
    """

    params: Any = None
    tree: bool = False
    has_weights: bool = False
    draft_model: bool = False
    vllm: tuple[str, ...] = ()
    sglang: tuple[str, ...] = ()
    doc: str | None = None


@dataclass(frozen=True)
class PolicyInfo:
    """What a policy may declare when it registers: ``params``, a pydantic model (a
    ``Section``) of its own settings, given in the scenario under the axis's ``params`` key
    (``router: {policy: name, params: {...}}``) and passed, validated, to its constructor."""

    params: Any = None


class Registry:
    """Names -> classes for one axis (routers, batch schedulers, speculation policies, ...)."""

    def __init__(self, axis: str, key: str, info: type | None = None) -> None:
        self.axis, self.key = axis, key  # key: the scenario key that names a policy
        self._entries: dict[str, Any] = {}
        self._info: dict[str, Any] = {}
        self._info_type = info  # the metadata an entry declares (None: no metadata)

    def register(self, name: str, **info: Any) -> Callable[[Any], Any]:
        """Decorator: ``cls`` (or a factory) under ``name``, with the axis's metadata."""
        if info and self._info_type is None:
            raise TypeError(f"{self.axis} registrations take no metadata, got {sorted(info)}")
        meta = self._info_type(**info) if self._info_type is not None else None

        def add(cls: Any) -> Any:
            self._entries[name] = cls
            self._info[name] = meta
            cls.name = name
            return cls

        return add

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def get(self, name: str) -> Any:
        if name not in self._entries:
            raise ScenarioError(f"{self.key}: expected one of {', '.join(self.names())}, got "
                                f"{name!r}")
        return self._entries[name]

    def info(self, name: str) -> Any:
        """What ``name`` declared when it registered (its axis's metadata type)."""
        self.get(name)
        return self._info[name]


ROUTERS = Registry("router", "router.policy", info=PolicyInfo)
BATCH_SCHEDULERS = Registry("batch scheduler", "scheduler.policy", info=PolicyInfo)
SPECULATION_POLICIES = Registry("speculation policy", "speculation.policy")
DRAFTERS = Registry("drafter", "speculation.method", info=DrafterInfo)
EVICTION = Registry("eviction policy", "scheduler.preemption")
RADIX_EVICTION = Registry("radix eviction strategy", "kv_cache.eviction")
