"""The scenario's value types: one pydantic type per kind of key, each checked by one rule.

Numbers go through ``specsim.values.number`` (finite; integers also take integral floats
such as ``1e3``; inclusive or exclusive bounds), choices through ``values.choice``; a broken
rule becomes ``fail(message)``, which the schema prints after the dotted key. A policy name
is checked against its registry when the scenario is read, so a policy or drafter a plug-in
registers is a valid name. ``Section`` is a scenario section (unknown keys are errors).
Drafters' own keys (``DrafterInfo.params``) are built from these types without importing
the schema.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from specsim import messages, values
from specsim.messages import fail
from specsim.simulator.registry import Registry
from specsim.values import INT_HI


def show(value: Any, limit: int = 60) -> str:
    """A value as a scenario message quotes it (60 characters at most)."""
    return messages.show(value, limit)


def _number(kind: str, lo: float | None, hi: float | None, exclusive_lo: bool,
            nullable: bool):
    def check(value: Any) -> Any:
        try:
            return values.number(value, integer=kind == "int", lo=lo, hi=hi,
                                 exclusive_lo=exclusive_lo, nullable=nullable)
        except values.ValueRuleError as exc:
            raise fail(str(exc)) from None

    check.kind, check.lo, check.hi = kind, lo, hi if hi is not None else (
        INT_HI if kind == "int" else None)
    return check


def _bounds(lo: float | None, hi: float | None, exclusive_lo: bool = False) -> Any:
    """The bounds in the JSON Schema (the check itself is the BeforeValidator's)."""
    extra: dict[str, Any] = {}
    if lo is not None:
        extra["exclusiveMinimum" if exclusive_lo else "minimum"] = lo
    if hi is not None:
        extra["maximum"] = hi
    return Field(json_schema_extra=extra)


def Int(lo: float | None = None, hi: float | None = None):  # noqa: N802 (a type factory)
    return Annotated[int, BeforeValidator(_number("int", lo, hi, False, False)),
                     _bounds(lo, hi if hi is not None else INT_HI)]


def OptInt(lo: float | None = None, hi: float | None = None):  # noqa: N802
    return Annotated[int | None, BeforeValidator(_number("int", lo, hi, False, True)),
                     _bounds(lo, hi if hi is not None else INT_HI)]


def Float(lo: float | None = None, hi: float | None = None, exclusive_lo: bool = False):  # noqa: N802
    return Annotated[float, BeforeValidator(_number("float", lo, hi, exclusive_lo, False)),
                     _bounds(lo, hi, exclusive_lo)]


def OptFloat(lo: float | None = None, hi: float | None = None,  # noqa: N802
             exclusive_lo: bool = False):
    return Annotated[float | None, BeforeValidator(_number("float", lo, hi, exclusive_lo, True)),
                     _bounds(lo, hi, exclusive_lo)]


def _typed(pytype: type, expected: str, nullable: bool = False):
    def check(value: Any) -> Any:
        if value is None:
            if nullable:
                return None
            raise fail("expected a value, got null")
        if not isinstance(value, pytype) or (pytype is int and isinstance(value, bool)):
            raise fail(f"expected {expected}, got {show(value)}")
        return value

    check.kind = {bool: "bool", str: "str", dict: "mapping"}.get(pytype, "ref")
    return check


Bool = Annotated[bool, BeforeValidator(_typed(bool, "true or false"))]
OptBool = Annotated[bool | None, BeforeValidator(_typed(bool, "true or false", nullable=True))]
Str = Annotated[str, BeforeValidator(_typed(str, "a string"))]
OptStr = Annotated[str | None, BeforeValidator(_typed(str, "a string", nullable=True))]
Mapping = Annotated[dict[str, Any], BeforeValidator(_typed(dict, "a mapping"))]
OptMapping = Annotated[dict[str, Any] | None,
                       BeforeValidator(_typed(dict, "a mapping", nullable=True))]
Ref = Annotated[str | dict[str, Any], BeforeValidator(
    _typed(str | dict, "a catalog name or an inline mapping"))]
OptRef = Annotated[str | dict[str, Any] | None, BeforeValidator(
    _typed(str | dict, "a catalog name or an inline mapping", nullable=True))]


def _auto_or_bool(value: Any) -> Any:
    if value == "auto" or isinstance(value, bool):
        return value
    raise fail(f"expected auto, true or false, got {show(value)}")


_auto_or_bool.kind = "choice"
_auto_or_bool.choices = ("auto", True, False)
AutoBool = Annotated[str | bool, BeforeValidator(_auto_or_bool),
                     Field(json_schema_extra={"enum": ["auto", True, False]})]


def _registered(registry: Registry):
    def check(value: Any) -> Any:
        try:
            return values.choice(value, registry.names())
        except values.ValueRuleError as exc:
            raise fail(str(exc)) from None

    check.kind = "choice"
    check.registry = registry
    return check


def _one_of(choices: tuple[str, ...]):
    def check(value: Any) -> Any:
        try:
            return values.choice(value, choices)
        except values.ValueRuleError as exc:
            raise fail(str(exc)) from None

    check.kind = "choice"
    check.choices = choices
    return check


def Choice(*choices: str):  # noqa: N802
    return Annotated[str, BeforeValidator(_one_of(choices)),
                     Field(json_schema_extra={"enum": list(choices)})]


def Policy(registry: Registry):  # noqa: N802
    def names(schema: dict[str, Any]) -> None:  # the names registered when asked
        schema["enum"] = registry.names()

    return Annotated[str, BeforeValidator(_registered(registry)),
                     Field(json_schema_extra=names)]


# ------------------------------------------------------------------ sections


class Section(BaseModel):
    """A scenario section: unknown keys are errors; values are read as attributes
    (``sec.key``, or ``getattr(sec, name)`` for a key held in a variable: a plug-in's
    ``params`` section too), never by key (no ``sec[key]`` or ``sec.get``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=False)


def section(cls: type[Section]):
    """A nested section: missing or null means all defaults; anything else must be a mapping."""

    def check(value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict | Section):
            raise fail(f"expected a mapping, got {show(value)}")
        return value

    return Annotated[cls, BeforeValidator(check), Field(default_factory=cls)]



def optional_section(cls: type[Section]):
    """A nested section that may be absent (null): None, or a mapping validated as ``cls``."""

    def check(value: Any) -> Any:
        if value is None or isinstance(value, dict | Section):
            return value
        raise fail(f"expected a mapping, got {show(value)}")

    return Annotated[cls | None, BeforeValidator(check), Field(default=None)]
