"""One registry per policy axis: a policy registers by name, a scenario picks it by name.

    from specsim.simulator.registry import ROUTERS

    @ROUTERS.register("my_router")
    class MyRouter(Router): ...

Registering from anywhere (a test, a notebook, a plug-in module) is enough for a scenario
that names it to find it; nothing in the library changes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from specsim.errors import ScenarioError


class Registry:
    """Names -> classes for one axis (routers, batch schedulers, speculation policies, ...)."""

    def __init__(self, axis: str, key: str) -> None:
        self.axis, self.key = axis, key  # key: the scenario key that names a policy
        self._entries: dict[str, Any] = {}

    def register(self, name: str) -> Callable[[Any], Any]:
        def add(cls: Any) -> Any:
            self._entries[name] = cls
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


ROUTERS = Registry("router", "router.policy")
BATCH_SCHEDULERS = Registry("batch scheduler", "scheduler.policy")
SPECULATION_POLICIES = Registry("speculation policy", "speculation.policy")
DRAFTERS = Registry("drafter", "speculation.method")
EVICTION = Registry("eviction policy", "scheduler.preemption")
RADIX_EVICTION = Registry("radix eviction strategy", "kv_cache.eviction")
