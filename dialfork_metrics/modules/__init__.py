"""The ``evaluate`` modules shipped with DialFork, as package data.

Each sub-folder ``<name>/`` holding a script ``<name>.py`` is an ``evaluate`` module (layout and
conventions: ``docs/evaluate_modules.md``). Load one offline with::

    >>> import dialfork_metrics
    >>> flowscore = dialfork_metrics.load("flowscore", encoder="minilm")  # doctest: +SKIP

which is ``evaluate.load(dialfork_metrics.module_path("flowscore"), encoder="minilm")``.
``evaluate.load("flowscore")`` (a bare name) does *not* find these: evaluate resolves a bare name
only to ``./flowscore/flowscore.py`` or to the ``evaluate-metric`` namespace on the Hub.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from dialfork_dataset.citation import CITATION

MODULES_DIR = Path(__file__).resolve().parent

_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")

DIALFORK_BIBTEX = CITATION
"""The citation every module card and ``MetricInfo.citation`` uses: :data:`dialfork_dataset.citation.CITATION`."""


def available() -> list[str]:
    """Names of the packaged modules: every sub-folder ``<name>`` that contains ``<name>.py``.

    Returns:
        The module names (lower-case identifiers), sorted.
    """
    return sorted(
        p.name
        for p in MODULES_DIR.iterdir()
        if p.is_dir() and _NAME_RE.match(p.name) and (p / f"{p.name}.py").is_file()
    )


def module_path(name: str) -> str:
    """Folder of the packaged module ``name`` (pass it to ``evaluate.load``).

    Args:
        name: ``"flowscore"``, ``"flowdtw"``, ``"flowkl"`` or ``"task3"`` (any packaged module).

    Returns:
        The absolute path of the module's folder.

    Raises:
        ValueError: ``name`` is not a packaged module (the message lists the available ones).
    """
    if not isinstance(name, str) or name not in available():
        raise ValueError(
            f"unknown DialFork evaluate module {name!r}; available: {', '.join(available()) or '(none)'}"
        )
    return str(MODULES_DIR / name)


def load(name: str, level: str | None = None, **kwargs: Any):
    """``evaluate.load`` of the packaged module ``name``, or of a registered metric's module written
    from its registry entry on first use (:func:`registered_module_path`); works offline
    (``HF_EVALUATE_OFFLINE=1``).

    Args:
        name: A packaged module (``"flowscore"``, ``"flowdtw"``, ``"flowkl"``, ``"task3"``), or the
            name of a metric in :mod:`dialfork_metrics.registry` (its entry and its function are
            the whole metric: the module folder is made from the entry).
        level: For a registered metric registered at both levels: ``"pair"`` (default) or ``"set"``.
        **kwargs: Passed to ``evaluate.load``: evaluate's own (``config_name``, ``cache_dir``,
            ``keep_in_memory``, ``experiment_id``, ``num_process``, ``process_id``...) and the
            module's load-time options (e.g. ``encoder="d2f"``, ``batch_size=64``, ``device="cuda"``).

    Returns:
        The ``evaluate.EvaluationModule``: ``add_batch``/``add`` in a loop, then ``compute()``.

    Raises:
        ValueError: ``name`` is neither a packaged module nor a registered metric with a module
            (the message lists both), or ``level`` is not ``"pair"``/``"set"``.
    """
    import evaluate

    if level is None and isinstance(name, str) and name in available():
        return evaluate.load(module_path(name), **kwargs)
    return evaluate.load(registered_module_path(name, level), **kwargs)


def registered_module_path(name: str, level: str | None = None) -> str:
    """The ``evaluate`` module folder of a registered metric, written from its registry entry
    (:func:`dialfork_metrics.module_folder.module_files`) into a cache the first time it is asked
    for: ``$DIALFORK_MODULES_CACHE``, else ``~/.cache/dialfork/modules``, under a folder named by
    the files' hash (an entry that changes gets a new folder; the write is atomic, so processes
    may race). ``python -m dialfork_metrics new-module NAME`` writes the same folder where you
    choose, to publish it as a Space.

    Args:
        name: The metric's name in :mod:`dialfork_metrics.registry`.
        level: ``"pair"`` or ``"set"``; None: the pair metric of that name, else the set metric.

    Returns:
        The module folder (``<cache>/<hash>/<module>``).

    Raises:
        ValueError: No registered metric of that name has a module (a seeded control has none),
            or ``level`` is not ``"pair"``/``"set"``.
    """
    import hashlib
    import os
    import shutil
    import tempfile

    from .. import registry
    from ..module_folder import module_files, write_module_folder

    if level not in (None, "pair", "set"):
        raise ValueError(f"level must be 'pair' or 'set', got {level!r}")
    levels = [level] if level else [lv for lv in ("pair", "set") if name in registry.names(lv)]
    if not levels:
        metrics = sorted(set(registry.names("pair")) | set(registry.names("set")))
        raise ValueError(
            f"unknown DialFork evaluate module or metric {name!r}; packaged modules: {', '.join(available())}; "
            f"registered metrics: {', '.join(metrics)} (register one with dialfork_metrics.registry.register)"
        )
    spec = registry.get(name, levels[0])
    module = spec.module or spec.name
    if module in available():  # a packaged folder of its own (flowscore, flowkl...)
        return module_path(module)
    files = module_files(name, levels[0])
    digest = hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()[:16]
    root = Path(os.environ.get("DIALFORK_MODULES_CACHE") or Path.home() / ".cache" / "dialfork" / "modules")
    final = root / f"{levels[0]}-{digest}"
    if not (final / module / f"{module}.py").is_file():
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=root, prefix=".partial-"))
        try:
            write_module_folder(name, levels[0], out=tmp)
            try:
                os.replace(tmp, final)  # atomic: a reader sees no folder or the whole folder
            except OSError:
                if not (final / module / f"{module}.py").is_file():
                    raise  # not another process's folder: a real failure
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return str(final / module)


def dialogue_features():
    """The two accepted ``Features`` for pair modules: one dialogue per row, as a list of turn
    strings or as a list of ``{speaker, text}`` dicts (evaluate picks the first that fits).

    Returns:
        A list of two ``datasets.Features``, each with ``predictions`` and ``references``: the
        list-of-strings form first, then the list-of-dicts form.
    """
    import datasets

    strings = datasets.List(datasets.Value("string"))
    dicts = datasets.List({"speaker": datasets.Value("string"), "text": datasets.Value("string")})
    return [
        datasets.Features({"predictions": strings, "references": strings}),
        datasets.Features({"predictions": dicts, "references": dicts}),
    ]


def dialogue_set_features():
    """As :func:`dialogue_features`, one row being a *set* of dialogues (e.g. ``flowkl``).

    Returns:
        A list of two ``datasets.Features`` (``predictions``, ``references``: lists of dialogues
        as lists of strings, then as lists of ``{speaker, text}`` dicts).
    """
    import datasets

    strings = datasets.List(datasets.List(datasets.Value("string")))
    dicts = datasets.List(
        datasets.List({"speaker": datasets.Value("string"), "text": datasets.Value("string")})
    )
    return [
        datasets.Features({"predictions": strings, "references": strings}),
        datasets.Features({"predictions": dicts, "references": dicts}),
    ]


def module_encoder(
    encoder: Any = None,
    config_name: str | None = None,
    batch_size: int = 64,
    device: str | None = None,
    embedding_cache_dir: str | None = None,
):
    """The encoder a module uses, from its load-time options: ``encoder=`` (an alias, a model
    path/id or an :class:`~dialfork_metrics.encoders.Encoder`) or else evaluate's ``config_name``
    (``evaluate.load(path, "d2f")``), default ``"minilm"``. String names give one shared
    :class:`~dialfork_metrics.encoders.Encoder` per process (modules loaded with the same encoder
    share the model and its cache). The name is checked now (``ValueError`` for an unknown alias);
    the model loads on first use.

    Args:
        encoder: An alias, a model path/id, an :class:`~dialfork_metrics.encoders.Encoder`
            (returned as is) or any object with ``encode(texts)``; None: use ``config_name``.
        config_name: evaluate's configuration name, read as the encoder name when ``encoder`` is
            None; None or ``"default"``: ``"minilm"``.
        batch_size: Encoder batch size.
        device: Torch device; None: chosen automatically.
        embedding_cache_dir: Persistent embedding cache folder; None: memory only.

    Returns:
        The encoder (for a name, the process's shared instance for those options).

    Raises:
        ValueError: An unknown encoder name (:func:`~dialfork_metrics.encoders.get_encoder`).
    """
    from dialfork_metrics.encoders import Encoder, get_encoder

    if isinstance(encoder, Encoder):
        return encoder
    name = encoder if encoder is not None else config_name
    if name is None or name == "default":
        name = "minilm"
    opts: dict[str, Any] = {"batch_size": batch_size}
    if device is not None:
        opts["device"] = device
    if embedding_cache_dir is not None:
        opts["cache_dir"] = embedding_cache_dir
    return get_encoder(name, **opts)


__all__ = [
    "DIALFORK_BIBTEX",
    "MODULES_DIR",
    "RejectEmpty",
    "available",
    "dialogue_features",
    "dialogue_set_features",
    "encoder_id",
    "load",
    "module_encoder",
    "module_path",
    "registered_module_path",
    "reject_empty",
]


HOMEPAGE = "https://github.com/idiap/dialfork"


def encoder_id(encoder: Any) -> str:
    """The id a module's output names its encoder by: the portable
    :attr:`~dialfork_metrics.encoders.Encoder.model_id` (``sentence-transformers/all-MiniLM-L6-v2``
    for ``minilm``, never a site-packages path), else the object's ``name``, else its class name.

    Args:
        encoder: The module's encoder.

    Returns:
        str: The id.
    """
    return str(getattr(encoder, "model_id", None) or getattr(encoder, "name", None) or type(encoder).__name__)


def reject_empty(module: str, what: str, predictions: Any, references: Any) -> None:
    """Refuse an empty batch with the module's own words, before evaluate indexes its first row
    (``compute(predictions=[], references=[])`` otherwise fails inside evaluate with ``IndexError``).

    Args:
        module: The module's name, first word of the message.
        what: What one row is, e.g. ``"(reference, prediction) pair of dialogues"``.
        predictions: The predictions given (None: not given, nothing to check).
        references: The references given (None: not given).

    Raises:
        ValueError: ``predictions`` or ``references`` is given and empty.
    """
    n_pred = None if predictions is None else len(predictions)
    n_ref = None if references is None else len(references)
    if n_pred == 0 or n_ref == 0:
        got = ", ".join(
            f"{n} {name}" for n, name in ((n_pred, "predictions"), (n_ref, "references")) if n is not None
        )
        raise ValueError(
            f"{module}: nothing to score ({got}): give at least one {what}, as predictions=[...] and "
            "references=[...] of the same length"
        )


class RejectEmpty:
    """Mixin placed before ``evaluate.Metric``: :func:`reject_empty` on ``add_batch`` and
    ``compute``. A subclass sets ``_module`` (its name) and ``_row`` (what one row is)."""

    _module = "dialfork"
    _row = "row"

    def add_batch(self, *, predictions=None, references=None, **kwargs):
        """``evaluate.Metric.add_batch``, refusing an empty batch with this module's message.

        Args:
            predictions: The batch's predictions.
            references: The batch's references.
            **kwargs: Passed to ``evaluate.Metric.add_batch``.

        Returns:
            What ``evaluate.Metric.add_batch`` returns.
        """
        reject_empty(self._module, self._row, predictions, references)
        return super().add_batch(predictions=predictions, references=references, **kwargs)

    def compute(self, *, predictions=None, references=None, **kwargs):
        """``evaluate.Metric.compute``, refusing empty predictions/references with this module's message.

        Args:
            predictions: The predictions (None: those added with ``add_batch``).
            references: The references (None: those added with ``add_batch``).
            **kwargs: The module's options, passed to ``evaluate.Metric.compute``.

        Returns:
            The module's result dict.
        """
        reject_empty(self._module, self._row, predictions, references)
        return super().compute(predictions=predictions, references=references, **kwargs)


def metric_info(
    description: str, inputs_description: str, features: Any, extra_references: tuple[str, ...] = ()
):
    """The ``evaluate.MetricInfo`` every DialFork module returns from ``_info`` (one citation,
    homepage and license for all; the module gives its texts, features and extra references).

    Args:
        description: The module's description.
        inputs_description: What ``compute`` takes and returns.
        features: The module's ``datasets.Features`` (or a list of them).
        extra_references: More reference URLs, after the homepage.

    Returns:
        The ``evaluate.MetricInfo``.
    """
    import evaluate

    return evaluate.MetricInfo(
        module_type="metric",
        description=description,
        citation=DIALFORK_BIBTEX,
        inputs_description=inputs_description,
        features=features,
        homepage=HOMEPAGE,
        codebase_urls=[HOMEPAGE],
        reference_urls=[HOMEPAGE, *extra_references],
        license="Apache-2.0",
    )
