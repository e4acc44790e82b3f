"""The metric registry: one entry per Task 1 (set-level) and Task 2 (pair-level) metric.

Every list of metric names in the toolkit is a view of this registry: the benchmark's method
lists (:data:`dialfork_metrics.methods.TASK1_METHODS`, ``TASK2_METHODS``, ``LABELS``), the
dialogue-level method groups (``dialfork_metrics.dialogue.EMBEDDING_METHODS``, ...), the
dispatch of :func:`dialfork_metrics.dialogue.score_pairs` and of the benchmark's Task 1 units,
the dialogue-level functions ``dialfork_metrics`` exports and the ``torchmetrics`` classes
(:func:`dialfork_metrics.torchmetrics.metric_class`). Adding a built-in metric is one
:class:`MetricSpec` below and its function; ``python -m dialfork_metrics new-module NAME`` writes its
``evaluate`` module folder from the entry.

Each level is one :class:`~dialfork_dataset.registry.Registry` (a name may exist at both levels,
with one label): :func:`register`, :func:`unregister`, :func:`get` and :func:`names` are its verbs,
:func:`view` its read-only mapping, and an unknown name raises
:class:`~dialfork_dataset.registry.RegistryError` (a ``ValueError``) listing the registered ones.

Functions are named lazily (``"package.module:attr"``) so that importing the registry imports
no numpy, scipy or torch; :meth:`MetricSpec.core_fn` and :meth:`MetricSpec.fn_callable` import
them on first use.

>>> spec = get("flowscore")
>>> spec.level, spec.input, spec.direction, spec.label, spec.module
('pair', 'similarity', 'lower', 'FlowScore', 'flowscore')
>>> names("set")[:3]
('flowkl', 'fbd', 'prd')
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dialfork_dataset.registry import Registry, RegistryError, is_ref, resolve
from dialfork_dataset.taxonomy import table4_order as _types_in_table4_order

logger = logging.getLogger(__name__)

#: ``"pair"``: a distance between two dialogues (Task 2); ``"set"``: between two sets (Task 1).
LEVELS: tuple[str, ...] = ("pair", "set")
#: ``"lower"``: a lower value means closer (a distance); ``"higher"``: closer (a similarity).
DIRECTIONS: tuple[str, ...] = ("lower", "higher")
#: What a pair metric's ``core`` is called with, once for all pairs of a ``score_pairs`` call:
#:
#: * ``"similarity"``: ``core(S, n_lens, m_lens) -> (B,)`` over padded cosine-similarity blocks
#:   of unit turn embeddings (``-inf`` in padded cells; one pass shared by all such metrics);
#: * ``"turn_embeddings"``: ``core(refs, cands, names) -> (K,)`` over lists of unit-row
#:   ``(n_turns, d)`` float64 matrices;
#: * ``"transcripts"``: ``core(T_ref, T_cand) -> (K,)`` over unit transcript embeddings ``(K, d)``;
#: * ``"turns"``: ``core(ref_turns, cand_turns) -> (K,)`` over validated ``{speaker, text}`` lists;
#: * ``"seed"``: no core; the benchmark draws the value from a seeded generator (Random).
PAIR_INPUTS: tuple[str, ...] = ("similarity", "turn_embeddings", "transcripts", "turns", "seed")
#: What a metric needs from its caller: a turn ``encoder``, a ``pair_encoder`` (FBD, PRD), a fitted
#: ``flow_graph`` (FlowKL), workflow ``nodes``, or a ``seed`` (Random).
NEEDS: tuple[str, ...] = ("encoder", "pair_encoder", "flow_graph", "nodes", "seed")
_ENCODED = ("similarity", "turn_embeddings", "transcripts")


@dataclass(frozen=True)
class MetricSpec:
    """What the toolkit reads about one metric.

    Args:
        name: The method name (``--task2-methods``, ``score_pairs(methods=...)``, report rows).
        level: ``"pair"`` (Task 2) or ``"set"`` (Task 1); a name may exist at both levels.
        label: Its display label in the reports.
        core: What the toolkit calls: for a pair metric, the batch core whose arguments
            ``input`` names; for a set metric, the benchmark's unit function
            ``core(ctx, task, reference_set, fork_set) -> float``
            (:mod:`dialfork_metrics.bench.task1`). A callable or ``"module:attr"``; None for Random.
        fn: The public function users call (e.g. ``dialfork_metrics.flowscore``), a callable or
            ``"module:attr"``; a ``"dialfork_metrics.<sub>:<name>"`` string with ``<name>`` equal
            to the metric's name is exported by ``dialfork_metrics``. None: none of its own.
        input: Pair metrics only: one of :data:`PAIR_INPUTS`.
        needs: What the metric needs from its caller (:data:`NEEDS`); for a pair metric,
            ``"encoder"`` is implied by an encoded ``input`` and ``"seed"`` by ``input="seed"``.
        direction: ``"lower"`` (a lower value is closer: a distance) or ``"higher"``.
        module: The packaged ``evaluate`` module computing it (``dialfork_metrics/modules/<module>``).
        control: A control (length, prefix, chance), not a competitor.
        flow_aware: It compares the dialogues' flows (FlowScore, FlowDTW, FlowKL): the reports say
            in words whether a control beats or ties with the flow-aware metrics.

    Raises:
        ValueError: A field is out of its vocabulary (the message names the metric and the field).
    """

    name: str
    level: str
    label: str
    core: str | Callable[..., Any] | None = None
    fn: str | Callable[..., Any] | None = None
    input: str | None = None
    needs: tuple[str, ...] = ()
    direction: str = "lower"
    module: str | None = None
    control: bool = False
    flow_aware: bool = False

    def __post_init__(self) -> None:
        where = f"metric {self.name!r}"
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"{where}: the name must be a non-empty string")
        if self.level not in LEVELS:
            raise ValueError(f"{where}: level {self.level!r} is not one of {LEVELS}")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"{where}: direction {self.direction!r} is not one of {DIRECTIONS}")
        if self.level == "pair" and self.input not in PAIR_INPUTS:
            raise ValueError(
                f"{where}: a pair metric declares input= one of {PAIR_INPUTS}, got {self.input!r}"
            )
        if self.level == "set" and self.input is not None:
            raise ValueError(f"{where}: input= is for pair metrics only (a set metric's core takes the unit)")
        if not isinstance(self.label, str) or not self.label.strip():
            raise ValueError(f"{where}: label must be a non-empty string (its name in the report's tables)")
        for f in ("core", "fn"):
            v = getattr(self, f)
            if v is not None and not (callable(v) or is_ref(v)):
                raise ValueError(f"{where}: {f} must be a callable or 'package.module:attr', got {v!r}")
        if isinstance(self.needs, str) or not all(isinstance(n, str) for n in self.needs):
            raise ValueError(f"{where}: needs must be a tuple of names from {NEEDS}, got {self.needs!r}")
        bad = [n for n in self.needs if n not in NEEDS]
        if bad:
            raise ValueError(f"{where}: unknown needs {bad}; known: {NEEDS}")
        for flag in ("control", "flow_aware"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{where}: {flag} must be True or False, got {getattr(self, flag)!r}")
        if self.module is not None and not (
            isinstance(self.module, str) and re.match(r"^[a-z][a-z0-9_]*$", self.module)
        ):
            raise ValueError(
                f"{where}: module {self.module!r} must name an evaluate module folder (lower case, digits, _)"
            )
        needs = set(self.needs)
        if self.input in _ENCODED:
            needs.add("encoder")
        if self.input == "seed":
            needs.add("seed")
        object.__setattr__(self, "needs", tuple(n for n in NEEDS if n in needs))
        if self.core is None and "seed" not in self.needs:
            raise ValueError(
                f"{where}: no core= (the function the toolkit calls); only a seeded control has none"
            )

    def core_fn(self) -> Callable[..., Any]:
        """The core, imported on first use.

        Returns:
            The callable ``core`` names.
        """
        return self._callable(self.core, "core")

    def fn_callable(self) -> Callable[..., Any]:
        """The user-facing function (``fn``), imported on first use.

        Returns:
            The callable ``fn`` names.
        """
        return self._callable(self.fn, "fn")

    def _callable(self, ref: str | Callable[..., Any] | None, field: str) -> Callable[..., Any]:
        """``ref`` resolved by the registries' one resolver (:func:`dialfork_dataset.registry.resolve`)."""
        if ref is None:
            raise ValueError(f"metric {self.name!r}: no {field}= (a callable or 'package.module:attr')")
        return resolve(ref, f"metric {self.name!r} {field}")


def _twin_label(spec: MetricSpec, registry: Registry) -> list[str]:
    """The reports label a name once: the same name at the other level must have the same label."""
    other = _REGISTRIES["set" if spec.level == "pair" else "pair"]
    twin = other.view.get(spec.name) if other is not registry else None
    if twin is not None and twin.label != spec.label:
        return [
            f"label {spec.label!r} differs from the {twin.level} metric's {twin.label!r}; the reports "
            "label a name once (use the same label or another name)"
        ]
    return []


_HINT = "dialfork_metrics.registry.register"
#: One registry per level (a name may exist at both): level -> :class:`~dialfork_dataset.registry.Registry`.
_REGISTRIES: dict[str, Registry[MetricSpec]] = {
    "pair": Registry("Task 2 (pair) metric", MetricSpec, add_hint=_HINT, check=_twin_label),
    "set": Registry("Task 1 (set) metric", MetricSpec, add_hint=_HINT, check=_twin_label),
}


def _level(level: str) -> Registry[MetricSpec]:
    try:
        return _REGISTRIES[level]
    except (KeyError, TypeError):
        raise ValueError(f"unknown metric level {level!r}; expected one of {LEVELS}") from None


def view(level: str = "pair") -> Mapping[str, MetricSpec]:
    """The registered metrics of a level, a read-only live mapping (``register`` is the one way to add).

    Args:
        level: ``"pair"`` (Task 2) or ``"set"`` (Task 1).

    Returns:
        ``name -> MetricSpec`` in registration (table) order.

    Raises:
        ValueError: ``level`` is not one of :data:`LEVELS`.
    """
    return _level(level).view


def register(spec: MetricSpec, *, replace: bool = False) -> MetricSpec:
    """Add a metric; it is seen at once by every method list, dispatch and report.

    Args:
        spec: The metric's :class:`MetricSpec`.
        replace: Replace an entry of the same name and level (else that is an error).

    Returns:
        ``spec``, so that ``register`` can be used inline.

    Raises:
        TypeError: ``spec`` is not a :class:`MetricSpec`.
        ValueError: The same name at the other level has another label.
        RegistryError: A metric of that name and level is registered and ``replace`` is False (a
            ``ValueError``).
    """
    if not isinstance(spec, MetricSpec):
        raise TypeError(f"register takes a MetricSpec, got {type(spec).__name__}")
    _REGISTRIES[spec.level].register(spec, replace=replace)
    logger.debug("registered %s metric %r", spec.level, spec.name)
    return spec


def unregister(name: str, level: str = "pair") -> MetricSpec:
    """Remove a metric (tests use it to undo a run-time registration).

    Args:
        name: The metric's name.
        level: ``"pair"`` or ``"set"``.

    Returns:
        The removed :class:`MetricSpec`.

    Raises:
        RegistryError: No such metric (a ``ValueError``; the message lists the registered ones).
        ValueError: ``level`` is not one of :data:`LEVELS`.
    """
    return _level(level).unregister(name)


def get(name: str, level: str = "pair") -> MetricSpec:
    """The :class:`MetricSpec` of a registered metric.

    Args:
        name: The metric's name.
        level: ``"pair"`` (Task 2) or ``"set"`` (Task 1).

    Returns:
        Its spec.

    Raises:
        RegistryError: No such metric at that level (a ``ValueError``; the message lists the
            registered ones).
        ValueError: ``level`` is not one of :data:`LEVELS`.
    """
    return _level(level).get(name)


def specs(level: str | None = None) -> list[MetricSpec]:
    """Registered specs in registration order (the order of the paper's tables).

    Args:
        level: ``"pair"``, ``"set"`` or None for both.

    Returns:
        The specs.
    """
    return [s for lv in LEVELS if level is None or lv == level for s in _level(lv).specs()]


def names(
    level: str = "pair",
    *,
    inputs: Sequence[str] | None = None,
    control: bool | None = None,
    needs: str | None = None,
    flow_aware: bool | None = None,
) -> tuple[str, ...]:
    """Names of the registered metrics of a level, in table order, optionally filtered.

    Args:
        level: ``"pair"`` or ``"set"``.
        inputs: Keep pair metrics whose ``input`` is one of these.
        control: Keep controls only (True) or competitors only (False).
        needs: Keep metrics that need this (:data:`NEEDS`).
        flow_aware: Keep flow-aware metrics only (True) or the others only (False).

    Returns:
        The names.
    """
    return tuple(
        s.name
        for s in specs(level)
        if (inputs is None or s.input in inputs)
        and (control is None or s.control == control)
        and (needs is None or needs in s.needs)
        and (flow_aware is None or s.flow_aware == flow_aware)
    )


def table4_order() -> tuple[str, ...]:
    """The hallucination-type columns of Table 4 (Task 3's per-type MAE), in the one order the
    benchmark's report and the leaderboard's detector table both use.

    Returns:
        The registered type codes sorted by their ``table4_key``
        (:func:`dialfork_dataset.taxonomy.table4_order`: alphabetical by default, the paper's
        ``CSC, GR, SSPC, WIC``).
    """
    return _types_in_table4_order()


def exports() -> dict[str, str]:
    """The dialogue-level functions ``dialfork_metrics`` exports: name -> submodule.

    Returns:
        ``{name: submodule}`` for every spec whose ``fn`` is ``"dialfork_metrics.<sub>:<name>"``.
    """
    out = {}
    for s in specs():
        if isinstance(s.fn, str) and s.fn.startswith("dialfork_metrics."):
            mod, _, attr = s.fn.partition(":")
            if attr == s.name and "." not in mod[len("dialfork_metrics.") :]:
                out[attr] = mod[len("dialfork_metrics.") :]
    return out


class NameView(Sequence[str]):
    """A live, read-only, tuple-like view of registered names (so that a metric registered at run
    time appears in ``TASK2_METHODS`` and the other old names).

    Args:
        select: A function returning the current names.
    """

    def __init__(self, select: Callable[[], tuple[str, ...]]):
        self._select = select

    def __getitem__(self, i):
        return self._select()[i]

    def __len__(self) -> int:
        return len(self._select())

    def __iter__(self) -> Iterator[str]:
        return iter(self._select())

    def __contains__(self, x: object) -> bool:
        return x in self._select()

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (
            tuple(other) if isinstance(other, Sequence) and not isinstance(other, str) else other
        )

    def __hash__(self) -> int:
        return hash(self._select())

    def __add__(self, other: Sequence[str]) -> tuple[str, ...]:
        return self._select() + tuple(other)

    def __radd__(self, other: Sequence[str]) -> tuple[str, ...]:
        return tuple(other) + self._select()

    def __repr__(self) -> str:
        return repr(self._select())


class LabelView(Mapping[str, str]):
    """A live view ``name -> display label`` over both levels, plus fixed extra labels.

    Args:
        extra: Labels of names that are not metrics (e.g. Task 3 detectors): a mapping, or a function
            returning the current ones (read at each access, so the view stays live).
    """

    def __init__(self, extra: Mapping[str, str] | Callable[[], Mapping[str, str]]):
        self._extra = extra if callable(extra) else dict(extra)

    def _all(self) -> dict[str, str]:
        extra = self._extra() if callable(self._extra) else self._extra
        return {**{s.name: s.label for s in specs()}, **extra}

    def __getitem__(self, k: str) -> str:
        return self._all()[k]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def __repr__(self) -> str:
        return repr(self._all())


# ----------------------------------------------------------------------------- built-in metrics
# Task 2 (pair level), in the order of the paper's Table 3.
_D, _DL = "dialfork_metrics.distances", "dialfork_metrics.dialogue"
#: The built-in metrics, both levels, in registration order (Task 2's in the order of the paper's
#: Table 3, then Task 1's): adding one is a ``MetricSpec`` at the end of its level's block.
BUILTIN_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("mean_turn", "pair", "Mean", f"{_D}:mean_turn_many", f"{_DL}:mean_turn", "turn_embeddings"),
    MetricSpec(
        "full_dialog", "pair", "Full", f"{_D}:unit_cosine_distances", f"{_DL}:full_dialog", "transcripts"
    ),
    MetricSpec(
        "flowdtw",
        "pair",
        "FlowDTW",
        f"{_D}:flowdtw_block",
        f"{_DL}:flowdtw",
        "similarity",
        module="flowdtw",
        flow_aware=True,
    ),
    MetricSpec(
        "flowscore",
        "pair",
        "FlowScore",
        f"{_D}:flowscore_block",
        f"{_DL}:flowscore",
        "similarity",
        module="flowscore",
        flow_aware=True,
    ),
    MetricSpec(
        "turn_count_diff",
        "pair",
        "Turn-count diff",
        f"{_DL}:turn_count_diffs",
        f"{_DL}:turn_count_diff",
        "turns",
        control=True,
    ),
    MetricSpec(
        "word_count_diff",
        "pair",
        "Word-count diff",
        f"{_DL}:word_count_diffs",
        f"{_DL}:word_count_diff",
        "turns",
        control=True,
    ),
    MetricSpec(
        "shared_prefix",
        "pair",
        "Shared prefix",
        f"{_DL}:shared_prefixes",
        f"{_DL}:shared_prefix",
        "turns",
        control=True,
    ),
    MetricSpec("random", "pair", "Random", input="seed", control=True),
    # Task 1 (set level), in the order of the paper's Table 2; cores are the benchmark's unit functions
    MetricSpec(
        "flowkl",
        "set",
        "FlowKL",
        "dialfork_metrics.bench.task1:flowkl_unit",
        "dialfork_metrics.flowgraph:flowkl",
        needs=("encoder", "flow_graph"),
        module="flowkl",
        flow_aware=True,
    ),
    MetricSpec(
        "fbd",
        "set",
        "FBD",
        "dialfork_metrics.bench.task1:fbd_unit",
        "dialfork_metrics.setlevel:fbd",
        needs=("pair_encoder",),
    ),
    MetricSpec(
        "prd",
        "set",
        "PRD",
        "dialfork_metrics.bench.task1:prd_unit",
        "dialfork_metrics.setlevel:prd",
        needs=("pair_encoder", "seed"),
    ),
    MetricSpec(
        "turn_count_diff",
        "set",
        "Turn-count diff",
        "dialfork_metrics.bench.task1:turn_count_unit",
        "dialfork_metrics.setlevel:set_turn_count_diff",
        control=True,
    ),
    MetricSpec(
        "word_count_diff",
        "set",
        "Word-count diff",
        "dialfork_metrics.bench.task1:word_count_unit",
        "dialfork_metrics.setlevel:set_word_count_diff",
        control=True,
    ),
    MetricSpec("random", "set", "Random", needs=("seed",), control=True),
)
for _spec in BUILTIN_METRICS:
    register(_spec)
del _spec


__all__ = [
    "BUILTIN_METRICS",
    "DIRECTIONS",
    "LEVELS",
    "LabelView",
    "MetricSpec",
    "NEEDS",
    "NameView",
    "PAIR_INPUTS",
    "RegistryError",
    "exports",
    "get",
    "names",
    "register",
    "specs",
    "table4_order",
    "unregister",
    "view",
]
