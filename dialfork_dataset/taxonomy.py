"""The one place that names DialFork's hallucination types and fork positions (SPEC sections 2-3).

A registry (:class:`~dialfork_dataset.registry.Registry`) of :class:`HallucinationType` entries, in
registration order; ``REGISTERED_TYPES`` is its read-only view. Everything that lists the
types, orders them for a table, names them for a reader, counts the forks of a source or asks
what a type needs reads it through the functions below, at call time, so a type registered at
run time (:func:`register`) is seen everywhere: generation, record validation, the Hub
export and its blind draw, the benchmark's tables, the leaderboard, the annotation study and the
agent audit. A built-in type is one module, ``generation/types/<code>.py`` (its entry, its planner,
its variant check) with its variants file, named at the end of :data:`BUILTIN_TYPES`
(``docs/extending.md``).

A type's position in the registry is its seed index (:func:`type_index`): types are appended,
never inserted, so that every corpus generated before keeps its forks.

:data:`BUILTIN_TYPES` names the built-in entries as ``"module:attr"`` strings (this package never
imports ``generation``): the registry imports them on its first use, before anything registered at
run time. The paper's four come first, in SPEC order; a type registered later (built in or at run
time) is appended after them, so the examples below hold with any extension registered:

>>> names()[:4]
('WIC', 'SSPC', 'GR', 'CSC')
>>> forks_per_source() == len(names()) * len(FORK_POSITIONS)  # 16 for the four
True
>>> [c for c in table4_order() if c in ("WIC", "SSPC", "GR", "CSC")]  # Table 4: alphabetical
['CSC', 'GR', 'SSPC', 'WIC']
>>> display_name("GR")
'goal replacement'
>>> get("WIC").substitute, breaking_types()[:3]
(True, ('WIC', 'SSPC', 'GR'))

``REGISTERED_TYPES`` is the registry's read-only live view (``code -> HallucinationType``). The
paper's constant names still read (``taxonomy.HALLUCINATION_TYPES``, ``TYPE_NAMES``,
``TABLE3_ORDER``, ``TABLE4_ORDER``, ``FORKS_PER_SOURCE``, ``EXPECTED_RANKING``): each is the
registry's state when it is read; ``from dialfork_dataset.taxonomy import HALLUCINATION_TYPES``
keeps the state at import, so library code calls the functions.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .registry import Registry, RegistryError, is_ref

#: Fork positions k: the fork turn t_k of a source dialogue (SPEC section 3).
FORK_POSITIONS: tuple[int, ...] = (1, 2, 3, 4)

#: The expected ranking of the four forks of a unit by distance to the source (fork at t_1 is the
#: farthest): the target of Task 1 and Task 2's Kendall tau.
EXPECTED_RANKING: tuple[int, ...] = tuple(sorted(FORK_POSITIONS, reverse=True))

_CODE = re.compile(r"^[A-Z][A-Z0-9_]{1,15}$")


@dataclass(frozen=True)
class HallucinationType:
    """What the toolkit reads about one hallucination type.

    Args:
        code: The type's code, as records store it (``hallucination_type``): 2 to 16 capitals,
            digits or ``_``, starting with a capital (``"WIC"``).
        name: Its name for readers (``"workflow identity corruption"``).
        breaks_task: Whether the type breaks a workflow component (the task's identity, its
            steps or its goal). The annotation study's main analyses (RQ1) pool these types;
            the paper's are WIC, SSPC and GR. A competing sub-goal (CSC) keeps the task.
        substitute: Whether a fork follows another task's workflow from t_k on. Its record then
            carries ``substitute_task`` (validated), the generator draws that task (same domain
            first, seeded by the code), the template backend's planner reads it as
            ``cx.d.substitute``, and the annotation cue names it (``cue``).
        table4_key: Its sort key in Table 4 (Task 3's per-type MAE) and the leaderboard's
            detector table; default the code (the paper's Table 4 is alphabetical).
        planner: The template backend's planner: a ``generation.backends.template.planners.Planner``
            or its ``"module:attr"`` name. Resolved (and imported) by the generator only, on
            first use; ``None``: the template backend cannot inject this type (the LLM backends
            need no planner: they receive the variant's instruction).
        variant_check: Checks of the type's variant material (the variants' ``template``
            blocks): ``check(items) -> list[str]`` over ``(location, template)`` pairs, a callable
            or its ``"module:attr"`` name, resolved by the variant loader; ``None``: no checks
            beyond the common fields.
        variants: The type's variants in the default pool: a YAML file (a ``pathlib.Path``, with
            ``version`` and ``variants``), a list of variant mappings, or the ``"module:attr"``
            name of either; read by ``generation.variants.load_variants``. ``None``: the type is
            in a pool only through a variant file of one's own (``variants_path``).
        cue: The annotation study's step-2 cue for a type with ``substitute``: a template whose
            ``{description}`` is the substitute task's one-line description; ``None``: the
            variant's own ``cue`` text.
        example_line: A system line that shows the deviation, for synthetic material (the
            annotation tool's demo records; never a generated fork).

    Raises:
        ValueError: A field is malformed (the message names the type and the field).
    """

    code: str
    name: str
    breaks_task: bool = False
    substitute: bool = False
    table4_key: str | None = None
    planner: str | Callable[..., Any] | Any | None = None
    variant_check: str | Callable[..., Any] | None = None
    variants: Any = None
    cue: str | None = None
    example_line: str = "Let us talk about something else entirely."

    def __post_init__(self) -> None:
        errs = []
        if not isinstance(self.code, str) or not _CODE.match(self.code):
            errs.append(f"code {self.code!r}: 2 to 16 capitals, digits or '_', starting with a capital")
        if not isinstance(self.name, str) or not self.name.strip():
            errs.append("name: a non-empty string")
        if self.cue is not None and (not self.substitute or "{description}" not in self.cue):
            errs.append("cue: only for a type with substitute=True, and it must contain {description}")
        for f in ("planner", "variant_check", "variants"):
            v = getattr(self, f)
            if isinstance(v, str) and not is_ref(v):
                errs.append(f"{f} {v!r}: a 'module:attr' name or an object")
        if not isinstance(self.example_line, str) or not self.example_line.strip():
            errs.append("example_line: a non-empty string")
        if errs:
            raise ValueError(f"hallucination type {self.code!r}: " + "; ".join(errs))

    @property
    def sort_key(self) -> str:
        """Its key in Table 4's order (``table4_key``, default the code)."""
        return self.table4_key or self.code


#: The built-in types, one module each (``generation/types/``), named as ``"module:attr"`` (this
#: package never imports ``generation``): the paper's four (SPEC section 2), in SPEC order. The
#: registry imports them on its first use, in this order (each one's seed index): append, never insert.
BUILTIN_TYPES: tuple[str, ...] = (
    "generation.types.wic:TYPE",
    "generation.types.sspc:TYPE",
    "generation.types.gr:TYPE",
    "generation.types.csc:TYPE",
)

_TYPES: Registry[HallucinationType] = Registry(
    "hallucination type",
    HallucinationType,
    key="code",
    add_hint="dialfork_dataset.taxonomy.register",
    builtins=BUILTIN_TYPES,
)


def register(spec: HallucinationType, *, replace: bool = False) -> HallucinationType:
    """Register a hallucination type; it is appended to the order (its seed index).

    Args:
        spec: The type.
        replace: Allow replacing a registered type of the same code (it keeps its position).

    Returns:
        ``spec``.

    Raises:
        TypeError: ``spec`` is not a :class:`HallucinationType`.
        RegistryError: The code is already registered and ``replace`` is false (a ``ValueError``).
    """
    return _TYPES.register(spec, replace=replace)


def unregister(code: str) -> HallucinationType:
    """Remove a registered type.

    Removing a type shifts the seed index of the types after it: meant for run-time additions
    (tests, plug-ins), not for the built-in four.

    Args:
        code: The type's code.

    Returns:
        The removed entry.

    Raises:
        RegistryError: ``code`` is not registered (the message lists the registered codes).
    """
    return _TYPES.unregister(code)


def get(code: str) -> HallucinationType:
    """The registered entry of ``code``.

    Args:
        code: A type code.

    Returns:
        Its :class:`HallucinationType`.

    Raises:
        RegistryError: ``code`` is not registered (a ``KeyError``); the message lists the
            registered codes.
    """
    return _TYPES.get(code)


def is_type(code: Any) -> bool:
    """Whether ``code`` is a registered type code.

    Args:
        code: Anything (a record's ``hallucination_type`` as read).

    Returns:
        True for a string naming a registered type.
    """
    return isinstance(code, str) and code in _TYPES


def names() -> tuple[str, ...]:
    """The registered type codes.

    Returns:
        The codes in registration order (SPEC order for the paper's four; the order of the
        paper's Tables 2 and 3).
    """
    return _TYPES.names()


def type_specs() -> tuple[HallucinationType, ...]:
    """The registered entries.

    Returns:
        The :class:`HallucinationType` entries, in registration order.
    """
    return _TYPES.specs()


def type_names() -> dict[str, str]:
    """The names of the types for readers (SPEC section 2).

    Returns:
        Each type code mapped to its name, in registration order.
    """
    return {c: s.name for c, s in _TYPES.view.items()}


def table3_order() -> tuple[str, ...]:
    """Column order of the per-type Kendall taus in Table 2 (Task 1) and Table 3 (Task 2).

    Returns:
        The type codes in registration order.
    """
    return names()


def table4_order() -> tuple[str, ...]:
    """Column order of the per-type MAEs in Table 4 (Task 3).

    Returns:
        The type codes sorted by ``table4_key`` (alphabetical by default, CSC first).
    """
    view = _TYPES.view
    return tuple(sorted(view, key=lambda c: (view[c].sort_key, c)))


def breaking_types() -> tuple[str, ...]:
    """The types that break a workflow component.

    Returns:
        The codes of the types with ``breaks_task``, in registration order.
    """
    return tuple(c for c, s in _TYPES.view.items() if s.breaks_task)


def substitute_types() -> tuple[str, ...]:
    """The types whose forks follow a substitute task.

    Returns:
        The codes of the types with ``substitute``, in registration order.
    """
    return tuple(c for c, s in _TYPES.view.items() if s.substitute)


def forks_per_source() -> int:
    """Forks generated per source dialogue.

    Returns:
        One per (registered type, fork position): 16 for the paper's four types.
    """
    return len(_TYPES) * len(FORK_POSITIONS)


def display_name(htype: str) -> str:
    """The human-readable name of a hallucination type.

    Args:
        htype: a registered type code.

    Returns:
        Its name, for example ``"goal replacement"`` for ``"GR"``.

    Raises:
        KeyError: ``htype`` is not a known type; the message lists the known ones.
    """
    return get(htype).name


def type_index(htype: str) -> int:
    """The position of ``htype`` in the registry (used to derive stable seeds).

    Args:
        htype: A registered type code.

    Returns:
        int: Its 0-based index.

    Raises:
        RegistryError: ``htype`` is not a registered type (a ``ValueError``; the message lists them).
    """
    _TYPES.get(htype)
    return _TYPES.names().index(htype)


def _registered_types() -> Mapping[str, HallucinationType]:
    return _TYPES.view


_CONSTANTS: dict[str, Callable[[], Any]] = {
    # the registered types, a read-only live mapping ``code -> HallucinationType`` in registration
    # order (register is the one way to add one); read on access, so that the built-ins load first
    "REGISTERED_TYPES": _registered_types,
    "HALLUCINATION_TYPES": names,
    "TYPE_NAMES": type_names,
    "TABLE3_ORDER": table3_order,
    "TABLE4_ORDER": table4_order,
    "FORKS_PER_SOURCE": forks_per_source,
}


def __getattr__(name: str) -> Any:
    """The paper's constant names, read from the registry when accessed (PEP 562)."""
    if name in _CONSTANTS:
        return _CONSTANTS[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BUILTIN_TYPES",
    "EXPECTED_RANKING",
    "FORK_POSITIONS",
    "HallucinationType",
    "RegistryError",
    "breaking_types",
    "display_name",
    "forks_per_source",
    "get",
    "names",
    "is_type",
    "register",
    "substitute_types",
    "table3_order",
    "table4_order",
    "type_index",
    "type_names",
    "type_specs",
    "unregister",
]
