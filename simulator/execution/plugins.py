"""Plug-ins the kernel has no data for, found by their methods, and the run's note.

The kernel (kernel_jit.py) plans, prices and commits with the built-in rules written once
there; a built-in drafter or cost model is data to it (a kind and its parameters). A
drafter, acceptance model, cost model, executor, batch scheduler or ledger written outside
specsim, or a built-in one whose method was replaced (a subclass overriding ``cost_steps``,
a method patched on the class or on the object), is called from the kernel through a
Python hook instead (``kernel.Kernel``): pricing between the compiled plan and its timing,
a ledger's ``add`` after the compiled commit, a scheduler's ``shape`` instead of the
kernel's fcfs step 0, and an acceptance model's ``accepted`` inside the plan's loop, which
therefore runs the kernel's pure-Python versions. The run gives the plug-in's results, only
slower. This module finds such objects by the methods the kernel relies on (each method
object's defining module, not just the object's class), so the kernel picks its hooks and
the run's notes say why.
"""

from __future__ import annotations

#: the methods the compiled kernel mirrors or bypasses, per axis
KERNEL_METHODS: dict[str, tuple[str, ...]] = {
    "drafter": ("cost_steps", "verify_width", "k_for_width", "match_probability"),
    "acceptance model": ("accepted",),
    "cost model": ("time_and_work", "time", "iteration_overhead", "speculation_overhead",
                   "_evaluate"),
    "executor": ("price",),
    "batch scheduler": ("shape", "admit", "blocked"),
    "ledger": ("add", "take"),
}

_OURS = "specsim."

#: the slowdown the note quotes (benchmarks/kernel_cost.py, the loop of 1,000 chat requests
#: against the built-in kernel's: a drafter's pricing hook 1.8x, a ledger's 1.2x, an
#: acceptance model's 14.6x)
SLOWDOWN = ("measured: a pricing or ledger hook 1.2-1.8x slower, an acceptance model, "
            "which runs the kernel's pure-Python versions, about 15x")


def _module(fn) -> str:
    return getattr(getattr(fn, "__func__", fn), "__module__", None) or ""


def foreign(obj, methods: tuple[str, ...]) -> list[str]:
    """Why ``obj`` is a plug-in to the compiled kernel: its class comes from outside specsim,
    or one of ``methods`` is defined outside specsim (overridden, patched on its class or
    set on the object); empty when it is a built-in one."""
    if obj is None:
        return []
    cls = type(obj)
    if not cls.__module__.startswith(_OURS):
        return [f"{cls.__module__}.{cls.__qualname__} is not a built-in"]
    why = []
    for name in methods:
        if name in getattr(obj, "__dict__", {}):
            why.append(f"its {name} is set on the object")
            continue
        fn = getattr(cls, name, None)
        if fn is not None and not _module(fn).startswith(_OURS):
            why.append(f"its {name} comes from {_module(fn) or 'outside specsim'}")
    return why


def plugin_notes(worker) -> list[str]:
    """One note per plug-in a worker runs with (empty when every part is built in)."""
    k = worker.kernel
    ex = k.executor
    parts = [("drafter", k.drafter), ("acceptance model", k.acceptance),
             ("cost model", getattr(ex, "target", None)), ("executor", ex),
             ("batch scheduler", worker.scheduler), ("ledger", worker.ledger)]
    for attr in ("model", "cost", "target"):  # a drafter's own cost model
        cm = getattr(k.drafter, attr, None)
        if cm is not None and hasattr(cm, "time_and_work"):
            parts.append(("cost model", cm))
    notes = []
    for axis, obj in parts:
        why = foreign(obj, KERNEL_METHODS[axis])
        if why:
            notes.append(f"plug-in {axis} {type(obj).__name__} ({'; '.join(why)}): the "
                         f"kernel has no data for its rules, so this run calls it from the "
                         f"kernel through a Python hook, which runs slower ({SLOWDOWN}; the "
                         f"results are the plug-in's own)")
    return list(dict.fromkeys(notes))


def pricing_plugins(executor) -> bool:
    """The executor, its target's cost model, its drafter or the drafter's own cost model
    is a plug-in: the Python pricing hook prices (``Kernel._price_args``)."""
    d = getattr(executor, "drafter", None)
    parts = [("executor", executor), ("cost model", getattr(executor, "target", None)),
             ("drafter", d)]
    for attr in ("model", "cost", "target"):  # a drafter's own cost model
        cm = getattr(d, attr, None)
        if cm is not None and hasattr(cm, "time_and_work"):
            parts.append(("cost model", cm))
    return any(foreign(obj, KERNEL_METHODS[axis]) for axis, obj in parts)


def note_plugins(notes: list[str], workers) -> None:
    """Add the workers' plug-in notes to a run's ``notes``, each once."""
    for note in (n for w in workers for n in getattr(w, "notes", ())):
        if note not in notes:
            notes.append(note)
