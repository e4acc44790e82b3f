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

>>> spec = get("it+nc")
>>> spec.label, spec.regime, spec.needs, spec.options
('IT+NC', 'streaming', ('encoder', 'false_alarm_rate'), {'method': 'it', 'node_confidence': True})
>>> names(regime="baselines")
('first', 'last', 'random')

A spec also says how its detector is saved and loaded back (``save_format``, ``loader``:
:func:`~dialfork_metrics.task3.load_detector` dispatches on the ``"format"`` of a saved folder's
``config.json``), and builds a detector from what a caller has (:meth:`DetectorSpec.build_from`):

>>> get("random").save_format, get("llm").save_format
('dialfork-task3-baseline', None)
>>> get("first").build_from({"encoder": "minilm", "seed": 3})  # needs neither: passed neither
FirstTurnBaseline()
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
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
#: The needs that are constructor keywords (:meth:`DetectorSpec.build_from` passes them); ``"forks"``
#: is what ``fit`` learns from, not a keyword.
KEYWORD_NEEDS: tuple[str, ...] = tuple(n for n in NEEDS if n != "forks")


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
        save_format: The ``"format"`` string its ``save(path)`` writes into the folder's
            ``config.json``; :func:`~dialfork_metrics.task3.load_detector` picks the spec by it
            (several specs may share one format when they share the loader, as the baselines do).
            None: it cannot be saved (``--save-detector`` refuses it). Given with ``loader``.
        loader: What loads a saved folder back: a function ``loader(path, **kwargs)`` (e.g. a
            ``load`` classmethod; it gets ``encoder=`` when it takes that keyword or the spec
            needs an encoder), or its ``"module:attr"`` string (imported on first use, like
            ``factory``). Given with ``save_format``.

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
    save_format: str | None = None
    loader: str | Callable[..., Any] | None = None

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
        if (self.save_format is None) != (self.loader is None):
            given, missing = ("save_format", "loader") if self.loader is None else ("loader", "save_format")
            raise ValueError(
                f"{where}: {given} is given without {missing}; a detector that can be saved names both "
                "(the format its save() writes and the function that loads it back), one that cannot neither"
            )
        if self.save_format is not None and (
            not isinstance(self.save_format, str) or not self.save_format.strip()
        ):
            raise ValueError(f"{where}: save_format must be a non-empty string, got {self.save_format!r}")
        if self.loader is not None and not (callable(self.loader) or is_ref(self.loader)):
            raise ValueError(
                f"{where}: loader must be a function, or 'package.module:attr', got {self.loader!r}"
            )

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

    def build_from(self, available: Mapping[str, Any], **options: Any) -> Any:
        """A new, unfitted detector from what a caller has: of ``available``, only the entries its
        :attr:`needs` name are passed (a detector that does not need an encoder never gets
        ``encoder=``), plus the constructor ``options`` (which win over ``available``).

        Args:
            available: What the caller can supply, by need (:data:`NEEDS`: ``encoder``,
                ``workflow``, ``false_alarm_rate``, ``seed``, ``model``; ``forks`` is never passed,
                it is what ``fit`` learns from).
            **options: Constructor options of this detector, passed as given.

        Returns:
            The unfitted detector (:meth:`build`).

        Raises:
            ValueError: A key of ``available`` is not one of :data:`NEEDS`, or the factory cannot be
                imported or rejects an option.
            TypeError: An option the factory does not take, or one the name fixes.

        Example:
            >>> get("random").build_from({"encoder": "minilm", "seed": 3, "false_alarm_rate": 0.1})
            RandomTurnBaseline(seed=3)
        """
        unknown = sorted(set(available) - set(NEEDS))
        if unknown:
            raise ValueError(
                f"Task 3 detector {self.name!r}: build_from got {unknown}, which are not needs; "
                f"available is keyed by {NEEDS} (pass constructor options as keywords)"
            )
        kw = {k: v for k, v in available.items() if k in self.needs and k in KEYWORD_NEEDS}
        return self.build(**{**kw, **options})

    def parameters(self) -> tuple[str, ...] | None:
        """The keyword arguments :meth:`build` takes: the factory's signature less the options the
        name fixes.

        Returns:
            Their names, in signature order; None when the factory takes any keyword (``**kwargs``)
            or has no signature to read.

        Raises:
            ValueError: The factory cannot be imported.
        """
        factory = self.factory_fn()
        try:
            sig = inspect.signature(factory)
        except (TypeError, ValueError):
            return None
        ps = sig.parameters.values()
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in ps):
            return None
        kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        return tuple(p.name for p in ps if p.kind in kinds and p.name not in self.options)

    def check_options(self, names: Iterable[str], what: str = "option") -> None:
        """Refuse, in one line, constructor options this detector does not take (before anything
        is built or fitted).

        Args:
            names: The option names.
            what: How the caller names an option in the message (``"--detector-option"``).

        Raises:
            TypeError: An option its name fixes, or one the factory does not take (the message
                names the detector and its parameters).
        """
        names = list(names)
        fixed = [k for k in names if k in self.options]
        if fixed:
            raise TypeError(
                f"{what} {', '.join(fixed)}: fixed by the name of Task 3 detector {self.name!r} "
                f"({self.options}); pick the detector whose name sets the value you want"
            )
        params = self.parameters()
        bad = [k for k in names if params is not None and k not in params]
        if bad:
            raise TypeError(
                f"{what} {', '.join(bad)}: Task 3 detector {self.name!r} takes no such option; its "
                f"parameters: {', '.join(params) if params else '(none)'}"
            )

    @property
    def can_save(self) -> bool:
        """Whether its detector can be saved and loaded back (``save_format`` and ``loader`` given)."""
        return self.save_format is not None

    def loader_fn(self) -> Callable[..., Any]:
        """The loader, imported on first use.

        Returns:
            The function ``loader`` names.

        Raises:
            ValueError: The detector cannot be saved (no loader), or the ``"module:attr"`` string
                cannot be imported.
        """
        if self.loader is None:
            raise ValueError(
                f"Task 3 detector {self.name!r} cannot be saved or loaded (its spec has no save_format/loader)"
            )
        return resolve(self.loader, f"Task 3 detector {self.name!r} loader")


_REGISTRY: Registry[DetectorSpec] = Registry(
    "Task 3 detector",
    DetectorSpec,
    normalize=lambda name: str(name).strip().lower(),
    add_hint="dialfork_metrics.task3.registry.register",
)

#: The detector registry, a read-only live mapping: name -> :class:`DetectorSpec`
#: (:func:`register` is the one way to add a detector).
DETECTORS: Mapping[str, DetectorSpec] = _REGISTRY.view


def register(spec: DetectorSpec, *, replace: bool = False) -> DetectorSpec:
    """Add a detector; it is seen at once by ``make_detector``, the CLIs, the benchmark and the report.

    Args:
        spec: The detector's :class:`DetectorSpec`.
        replace: Replace a registered detector of the same name (else that is an error).

    Returns:
        ``spec``, so that ``register`` can be used inline.

    Raises:
        TypeError: ``spec`` is not a :class:`DetectorSpec`.
        RegistryError: A detector of that name is registered and ``replace`` is False (a
            ``ValueError``).
        ValueError: Another detector saves the same ``save_format`` with another loader (a saved
            folder would not say which loads it).
    """
    clash = [
        s.name
        for s in _REGISTRY.specs()
        if isinstance(spec, DetectorSpec)
        and spec.save_format is not None
        and s.name != spec.name
        and s.save_format == spec.save_format
        and s.loader != spec.loader
    ]
    if clash:
        raise ValueError(
            f"Task 3 detector {spec.name!r}: save_format {spec.save_format!r} is that of {', '.join(clash)}, "
            "loaded by another loader; give the detector its own format"
        )
    _REGISTRY.register(spec, replace=replace)
    logger.debug("registered Task 3 detector %r", spec.name)
    return spec


def unregister(name: str) -> DetectorSpec:
    """Remove a detector (tests use it to undo a run-time registration).

    Args:
        name: The detector's name.

    Returns:
        The removed :class:`DetectorSpec`.

    Raises:
        RegistryError: No such detector (a ``ValueError``; the message lists the registered ones).
    """
    return _REGISTRY.unregister(name)


def get(name: str) -> DetectorSpec:
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


def names(
    *,
    regime: str | None = None,
    in_benchmark: bool | None = None,
    ngram: bool | None = None,
    guard: bool | None = None,
    needs: str | None = None,
    can_save: bool | None = None,
) -> tuple[str, ...]:
    """Names of the registered detectors, in table order, optionally filtered.

    Args:
        regime: Keep detectors of this regime (:data:`REGIMES`).
        in_benchmark: Keep those in (True) or out of (False) the benchmark's default run.
        ngram: Keep the IT/SS N-gram detectors (True) or the others (False).
        guard: Keep those the guard can run (True) or cannot (False).
        needs: Keep those that need this (:data:`NEEDS`).
        can_save: Keep those that can be saved and loaded back (True) or cannot (False).

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
        and (can_save is None or s.can_save == can_save)
    )


def save_formats() -> dict[str, tuple[str, ...]]:
    """The formats saved detectors are read in: ``format -> names of the detectors that save it``.

    Returns:
        The formats, in table order of their first detector.
    """
    out: dict[str, tuple[str, ...]] = {}
    for s in _REGISTRY.specs():
        if s.save_format is not None:
            out[s.save_format] = (*out.get(s.save_format, ()), s.name)
    return out


def detector_for_format(fmt: Any, where: str = "a saved detector") -> DetectorSpec:
    """The spec that loads a saved folder whose ``config.json`` says ``"format": fmt`` (the first
    registered one, when several detectors share the format and its loader).

    Args:
        fmt: The ``"format"`` value read.
        where: What was read, for the message (e.g. the ``config.json`` path).

    Returns:
        The detector's spec.

    Raises:
        ValueError: No registered detector saves that format (the message lists the formats).
    """
    for s in _REGISTRY.specs():
        if s.save_format is not None and s.save_format == fmt:
            return s
    known = "; ".join(f"{f} ({', '.join(ns)})" for f, ns in save_formats().items())
    raise ValueError(f"{where}: unknown detector format {fmt!r}; registered formats: {known or '(none)'}")


def exports() -> dict[str, str]:
    """The detector classes ``dialfork_metrics.task3`` exports, read from the registry.

    Returns:
        dict[str, str]: Each registered factory named ``"dialfork_metrics.task3.<sub>:<Name>"`` (a
        class or function of the package) as ``{Name: sub}``, in registration order: the package's
        lazy export table takes them, and the API reference lists them.
    """
    out: dict[str, str] = {}
    for s in _REGISTRY.specs():
        mod, _, attr = s.factory.partition(":") if isinstance(s.factory, str) else ("", "", "")
        if mod.startswith("dialfork_metrics.task3.") and attr and "." not in attr:
            out.setdefault(attr, mod.removeprefix("dialfork_metrics.task3."))
    return out


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
        out = {r: names(regime=r) for r in REGIMES}
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
_B, _S = "dialfork_metrics.task3.baselines.trivial", "dialfork_metrics.task3.streaming:StreamingDetector"
_STREAMING_NEEDS = ("encoder", "false_alarm_rate")
# the "format" each save() writes into config.json (literal here: the registry imports no detector
# module; tests/test_detector_consumers.py checks them against the modules' FORMAT constants)
_BASELINE_SAVE = {"save_format": "dialfork-task3-baseline", "loader": f"{_B}:load_baseline"}
_STREAMING_SAVE = {"save_format": "dialfork-task3-streaming-detector", "loader": f"{_S}.load"}
#: The built-in detectors, in registration order (the paper's Table 4): adding one is a
#: ``DetectorSpec`` here and its class.
BUILTIN_DETECTORS: tuple[DetectorSpec, ...] = (
    DetectorSpec(
        "first",
        "Always first",
        "baselines",
        f"{_B}:FirstTurnBaseline",
        in_benchmark=True,
        description="always the first system turn",
        **_BASELINE_SAVE,
    ),
    DetectorSpec(
        "last",
        "Always last",
        "baselines",
        f"{_B}:LastTurnBaseline",
        in_benchmark=True,
        description="always the last system turn",
        **_BASELINE_SAVE,
    ),
    DetectorSpec(
        "random",
        "Random",
        "baselines",
        f"{_B}:RandomTurnBaseline",
        ("seed",),
        in_benchmark=True,
        description="a uniformly random system turn, seeded per dialogue",
        **_BASELINE_SAVE,
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
        **_STREAMING_SAVE,
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
        **_STREAMING_SAVE,
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
        **_STREAMING_SAVE,
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
        **_STREAMING_SAVE,
    ),
    DetectorSpec(
        "wf",
        "WF (workflow-aware)",
        "workflow-aware",
        "dialfork_metrics.task3.workflow.detector:WorkflowDetector",
        ("encoder", "workflow", "false_alarm_rate"),
        in_benchmark=True,
        guard=True,
        description="node assignment against the workflow, with rejection and repeats",
        save_format="dialfork-task3-workflow",
        loader="dialfork_metrics.task3.workflow.detector:WorkflowDetector.load",
    ),
    DetectorSpec(
        "wf-sup",
        "WF-sup (supervised)",
        "workflow-aware",
        "dialfork_metrics.task3.supervised.detector:SupervisedWorkflowDetector",
        ("encoder", "workflow", "false_alarm_rate", "forks"),
        description="a per-turn classifier fitted on forked train dialogues",
        save_format="dialfork-task3-workflow-supervised",
        loader="dialfork_metrics.task3.supervised.detector:SupervisedWorkflowDetector.load",
    ),
    DetectorSpec(
        "llm",
        "LLM (zero-shot)",
        "other",
        "dialfork_metrics.task3.llm.detector:LLMDetector",
        ("model",),
        description="a zero-shot LLM asked for the first deviating system turn",
    ),
)
for _spec in BUILTIN_DETECTORS:
    register(_spec)
del _spec


__all__ = [
    "BENCH_SUPPLIES",
    "BUILTIN_DETECTORS",
    "DETECTORS",
    "DetectorSpec",
    "KEYWORD_NEEDS",
    "NEEDS",
    "REGIMES",
    "RegimeView",
    "RegistryError",
    "detector_for_format",
    "detector_labels",
    "names",
    "detector_specs",
    "exports",
    "get",
    "register",
    "save_formats",
    "unregister",
]
