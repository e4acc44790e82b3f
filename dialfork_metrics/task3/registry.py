"""The Task 3 detector registry: one :class:`DetectorSpec` per detector.

Every list of detector names in the toolkit is a view of this registry: the benchmark's default
detectors (:data:`dialfork_metrics.methods.TASK3_DETECTORS`), the report's labels
(``methods.LABELS``) and regimes (``methods.TASK3_REGIMES``), :func:`dialfork_metrics.task3.make_detector`
and its lists (``detectors.DETECTOR_NAMES``, ``STREAMING_DETECTORS``, ...), the choices of
``python -m dialfork_metrics.task3 predict --detector``, ``python -m dialfork_metrics.guard --detector``
and the validation of ``python -m dialfork_metrics.bench --task3-detectors``. Adding a detector is
its class (or factory) and one :class:`DetectorSpec`.

The registry is a :class:`~dialfork_dataset.registry.Registry` (:data:`DETECTORS` is its read-only
view); an unknown name raises :class:`~dialfork_dataset.registry.RegistryError` (a ``ValueError``)
listing the registered detectors.

Factories are named lazily (``"package.module:attr"``) so that importing the registry imports no
numpy or torch; :meth:`DetectorSpec.factory_fn` imports them on first use.

>>> spec = get_detector("it+nc")
>>> spec.label, spec.regime, spec.needs, spec.options
('IT+NC', 'streaming', ('encoder', 'false_alarm_rate'), {'method': 'it', 'node_confidence': True})
>>> detector_names(regime="baselines")
('first', 'last', 'random')
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from dialfork_dataset.registry import Registry, RegistryError, is_ref, resolve

logger = logging.getLogger(__name__)

#: The regimes Appendix I compares the winners of; ``"other"`` holds the rest (the LLM detector).
REGIMES: tuple[str, ...] = ("baselines", "streaming", "workflow-aware", "other")
#: What a detector needs from its caller (the benchmark passes what it can, keyword by keyword):
#:
#: * ``"encoder"``: ``encoder=`` (an alias, path or encoder object);
#: * ``"workflow"``: ``workflow=``, the dialogues' workflow source (``star:PATH``, a ``WorkflowSource``);
#: * ``"false_alarm_rate"``: ``false_alarm_rate=``, the operating point it calibrates to;
#: * ``"seed"``: ``seed=``;
#: * ``"forks"``: its ``fit`` learns from labelled forks (train dialogues with forks), not from the
#:   conformant train split alone; the benchmark skips it (scored leave-task-out by
#:   ``benchmarks/bench_task3_tracks.py``);
#: * ``"model"``: ``model=`` and the other options of an LLM; the benchmark skips it.
NEEDS: tuple[str, ...] = ("encoder", "workflow", "false_alarm_rate", "seed", "forks", "model")
#: The needs the benchmark's Task 3 run (:func:`dialfork_metrics.bench.run_task3`) supplies.
BENCH_SUPPLIES: tuple[str, ...] = ("encoder", "workflow", "false_alarm_rate", "seed")


@dataclass(frozen=True)
class DetectorSpec:
    """What the toolkit reads about one Task 3 detector.

    Args:
        name: The detector's name (``make_detector(name)``, ``--detector``, ``--task3-detectors``,
            report rows): lower case, no surrounding spaces.
        label: Its display label in the reports.
        regime: One of :data:`REGIMES` (Appendix I compares the winner of each).
        factory: What builds an unfitted detector: a class or function called with ``options``
            and the caller's keyword arguments, or its ``"module:attr"`` string (imported on first
            use). The detector has ``fit(train_dialogues)`` and ``predict_many(dialogues)``
            returning one 1-based system turn index (or None) per dialogue.
        needs: What it needs from its caller (:data:`NEEDS`).
        options: Keyword arguments fixed by the name (``{"method": "it"}`` for ``it``); a caller
            cannot pass them again.
        in_benchmark: In the benchmark's default Task 3 run (:data:`~dialfork_metrics.methods.TASK3_DETECTORS`).
        ngram: An IT/SS N-gram detector (:class:`~dialfork_metrics.task3.StreamingDetector`): it takes
            ``preset=``, ``order=``, ``scope=`` and precomputed embeddings, and the benchmark selects
            its settings, draws its trade-off curve and runs it in Table 9 and the ablations.
        guard: The guard (:mod:`dialfork_metrics.guard`) can run it on live conversations.
        description: One line on what it does.

    Raises:
        ValueError: A field is out of its vocabulary or of the wrong type (the message names the
            detector and the field).
    """

    name: str
    label: str
    regime: str
    factory: str | Callable[..., Any]
    needs: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    in_benchmark: bool = False
    ngram: bool = False
    guard: bool = False
    description: str = ""

    def __post_init__(self) -> None:
        where = f"Task 3 detector {self.name!r}"
        if not isinstance(self.name, str) or not self.name or self.name != self.name.strip().lower():
            raise ValueError(
                f"{where}: name must be a non-empty lower-case string without surrounding spaces "
                "(make_detector lower-cases and strips the names it is given)"
            )
        if not isinstance(self.label, str) or not self.label.strip():
            raise ValueError(f"{where}: label must be a non-empty string (its name in the report's tables)")
        if self.regime not in REGIMES:
            raise ValueError(f"{where}: regime {self.regime!r} is not one of {REGIMES}")
        if not (callable(self.factory) or is_ref(self.factory)):
            raise ValueError(
                f"{where}: factory must be a class or function, or 'package.module:attr', "
                f"got {self.factory!r}"
            )
        if isinstance(self.needs, str) or not all(isinstance(n, str) for n in self.needs):
            raise ValueError(f"{where}: needs must be a tuple of names from {NEEDS}, got {self.needs!r}")
        bad = [n for n in self.needs if n not in NEEDS]
        if bad:
            raise ValueError(f"{where}: unknown needs {bad}; known: {NEEDS}")
        object.__setattr__(self, "needs", tuple(n for n in NEEDS if n in self.needs))
        if not isinstance(self.options, Mapping) or not all(isinstance(k, str) for k in self.options):
            raise ValueError(f"{where}: options must be a mapping of keyword arguments, got {self.options!r}")
        object.__setattr__(self, "options", dict(self.options))
        for flag in ("in_benchmark", "ngram", "guard"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"{where}: {flag} must be True or False, got {getattr(self, flag)!r}")
        if self.in_benchmark and not set(self.needs) <= set(BENCH_SUPPLIES):
            raise ValueError(
                f"{where}: in_benchmark=True but it needs {sorted(set(self.needs) - set(BENCH_SUPPLIES))}, "
                f"which the benchmark does not supply (it supplies {BENCH_SUPPLIES})"
            )
        if not isinstance(self.description, str):
            raise ValueError(f"{where}: description must be a string, got {self.description!r}")

    def factory_fn(self) -> Callable[..., Any]:
        """The factory, imported on first use.

        Returns:
            The class or function ``factory`` names.

        Raises:
            ValueError: The ``"module:attr"`` string cannot be imported.
        """
        return resolve(self.factory, f"Task 3 detector {self.name!r} factory")

    def build(self, **kwargs: Any) -> Any:
        """A new, unfitted detector: ``factory(**options, **kwargs)``.

        Args:
            **kwargs: The detector's constructor options.

        Returns:
            The unfitted detector.

        Raises:
            TypeError: ``kwargs`` repeats an option the name fixes, or one the factory does not take.
            ValueError: The factory cannot be imported, or rejects an option.
        """
        fixed = sorted(set(kwargs) & set(self.options))
        if fixed:
            raise TypeError(
                f"Task 3 detector {self.name!r}: {', '.join(k + '=' for k in fixed)} is fixed by the name "
                f"({self.options}); pick the detector whose name sets the value you want"
            )
        return self.factory_fn()(**self.options, **kwargs)


_REGISTRY: Registry[DetectorSpec] = Registry(
    "Task 3 detector",
    DetectorSpec,
    normalize=lambda name: str(name).strip().lower(),
    add_hint="dialfork_metrics.task3.register_detector",
)

#: The detector registry, a read-only live mapping: name -> :class:`DetectorSpec`
#: (:func:`register_detector` is the one way to add a detector).
DETECTORS: Mapping[str, DetectorSpec] = _REGISTRY.view


def register_detector(spec: DetectorSpec, *, replace: bool = False) -> DetectorSpec:
    """Add a detector; it is seen at once by ``make_detector``, the CLIs, the benchmark and the report.

    Args:
        spec: The detector's :class:`DetectorSpec`.
        replace: Replace a registered detector of the same name (else that is an error).

    Returns:
        ``spec``, so that ``register_detector`` can be used inline.

    Raises:
        TypeError: ``spec`` is not a :class:`DetectorSpec`.
        RegistryError: A detector of that name is registered and ``replace`` is False (a
            ``ValueError``).
    """
    _REGISTRY.register(spec, replace=replace)
    logger.debug("registered Task 3 detector %r", spec.name)
    return spec


def unregister_detector(name: str) -> DetectorSpec:
    """Remove a detector (tests use it to undo a run-time registration).

    Args:
        name: The detector's name.

    Returns:
        The removed :class:`DetectorSpec`.

    Raises:
        RegistryError: No such detector (a ``ValueError``; the message lists the registered ones).
    """
    return _REGISTRY.unregister(name)


def get_detector(name: str) -> DetectorSpec:
    """The :class:`DetectorSpec` of a registered detector.

    Args:
        name: The detector's name (case and surrounding spaces ignored).

    Returns:
        Its spec.

    Raises:
        RegistryError: No such detector (a ``ValueError``; the message lists the registered ones).
    """
    return _REGISTRY.get(name)


def detector_specs() -> list[DetectorSpec]:
    """Registered specs in registration order (the order of the paper's tables).

    Returns:
        The specs.
    """
    return list(_REGISTRY.specs())


def detector_names(
    *,
    regime: str | None = None,
    in_benchmark: bool | None = None,
    ngram: bool | None = None,
    guard: bool | None = None,
    needs: str | None = None,
) -> tuple[str, ...]:
    """Names of the registered detectors, in table order, optionally filtered.

    Args:
        regime: Keep detectors of this regime (:data:`REGIMES`).
        in_benchmark: Keep those in (True) or out of (False) the benchmark's default run.
        ngram: Keep the IT/SS N-gram detectors (True) or the others (False).
        guard: Keep those the guard can run (True) or cannot (False).
        needs: Keep those that need this (:data:`NEEDS`).

    Returns:
        The names.
    """
    return tuple(
        s.name
        for s in _REGISTRY.specs()
        if (regime is None or s.regime == regime)
        and (in_benchmark is None or s.in_benchmark == in_benchmark)
        and (ngram is None or s.ngram == ngram)
        and (guard is None or s.guard == guard)
        and (needs is None or needs in s.needs)
    )


def detector_labels() -> dict[str, str]:
    """``name -> display label`` of every registered detector.

    Returns:
        The labels, in table order.
    """
    return {s.name: s.label for s in _REGISTRY.specs()}


class RegimeView(Mapping[str, tuple[str, ...]]):
    """A live, read-only view ``regime -> detector names`` of the regimes that have a detector (so that
    a detector registered at run time appears in ``TASK3_REGIMES``)."""

    def _all(self) -> dict[str, tuple[str, ...]]:
        out = {r: detector_names(regime=r) for r in REGIMES}
        return {r: ds for r, ds in out.items() if ds}

    def __getitem__(self, regime: str) -> tuple[str, ...]:
        return self._all()[regime]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def __repr__(self) -> str:
        return repr(self._all())


# ----------------------------------------------------------------------------- built-in detectors
# In the order of the paper's Table 4: the trivial baselines, the streaming detectors, then ours.
_B, _S = "dialfork_metrics.task3.baselines", "dialfork_metrics.task3.streaming:StreamingDetector"
_STREAMING_NEEDS = ("encoder", "false_alarm_rate")
for _spec in (
    DetectorSpec(
        "first",
        "Always first",
        "baselines",
        f"{_B}:FirstTurnBaseline",
        in_benchmark=True,
        description="always the first system turn",
    ),
    DetectorSpec(
        "last",
        "Always last",
        "baselines",
        f"{_B}:LastTurnBaseline",
        in_benchmark=True,
        description="always the last system turn",
    ),
    DetectorSpec(
        "random",
        "Random",
        "baselines",
        f"{_B}:RandomTurnBaseline",
        ("seed",),
        in_benchmark=True,
        description="a uniformly random system turn, seeded per dialogue",
    ),
    DetectorSpec(
        "it",
        "IT",
        "streaming",
        _S,
        _STREAMING_NEEDS,
        {"method": "it", "node_confidence": False},
        in_benchmark=True,
        ngram=True,
        guard=True,
        description="Improbable Transition: the first turn whose N-gram probability falls below the threshold",
    ),
    DetectorSpec(
        "ss",
        "SS",
        "streaming",
        _S,
        _STREAMING_NEEDS,
        {"method": "ss", "node_confidence": False},
        in_benchmark=True,
        ngram=True,
        guard=True,
        description="Surprisal Spike: the first turn whose surprisal jumps above the threshold",
    ),
    DetectorSpec(
        "it+nc",
        "IT+NC",
        "streaming",
        _S,
        _STREAMING_NEEDS,
        {"method": "it", "node_confidence": True},
        in_benchmark=True,
        ngram=True,
        guard=True,
        description="IT with the probability weighted by node confidence",
    ),
    DetectorSpec(
        "ss+nc",
        "SS+NC",
        "streaming",
        _S,
        _STREAMING_NEEDS,
        {"method": "ss", "node_confidence": True},
        in_benchmark=True,
        ngram=True,
        guard=True,
        description="SS with the probability weighted by node confidence",
    ),
    DetectorSpec(
        "wf",
        "WF (workflow-aware)",
        "workflow-aware",
        "dialfork_metrics.task3.workflow_detector:WorkflowDetector",
        ("encoder", "workflow", "false_alarm_rate"),
        in_benchmark=True,
        guard=True,
        description="node assignment against the workflow, with rejection and repeats",
    ),
    DetectorSpec(
        "wf-sup",
        "WF-sup (supervised)",
        "workflow-aware",
        "dialfork_metrics.task3.workflow_supervised:SupervisedWorkflowDetector",
        ("encoder", "workflow", "false_alarm_rate", "forks"),
        description="a per-turn classifier fitted on forked train dialogues",
    ),
    DetectorSpec(
        "llm",
        "LLM (zero-shot)",
        "other",
        "dialfork_metrics.task3.llm:LLMDetector",
        ("model",),
        description="a zero-shot LLM asked for the first deviating system turn",
    ),
):
    register_detector(_spec)
del _spec


__all__ = [
    "BENCH_SUPPLIES",
    "DETECTORS",
    "DetectorSpec",
    "NEEDS",
    "REGIMES",
    "RegimeView",
    "RegistryError",
    "detector_labels",
    "detector_names",
    "detector_specs",
    "get_detector",
    "register_detector",
    "unregister_detector",
]
