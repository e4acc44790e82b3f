"""Is a generated conformant dialogue D+ conformant? The check the generation engine runs on each D+.

Each system turn of a D+ is mapped to a step of its task's workflow, or to none, by the toolkit's
node assigner (:class:`~dialfork_metrics.task3.workflow.nodes.NodeAssigner`, every task of the
source as rivals, the own-workflow floor read off the workflow's own phrasings as the ``wf``
detector and the audit read it). From the steps (SPEC section 4; ours, documented in
docs/spec.md, "Checked conformant dialogues"):

* ``off_workflow``: the system turns (1-based) another task's workflow fits better than its own
  (the agent ran another workflow: what WIC, GR and CSC forks do on purpose);
* ``unfamiliar``: system turns near no step of any workflow (reported, not held against D+: an LLM
  agent's small talk, a re-phrased step the workflow's texts do not cover);
* ``coverage``: the share of the happy path's content steps the dialogue says (greeting, "anything
  else" and goodbye excepted), ``skipped`` the others, ``reached_outcome`` whether the workflow's
  outcome step was said (the audit's :func:`~dialfork_metrics.task3.workflow.coverage.step_coverage`).

A D+ is ``conformant`` when it has at most ``max_off_workflow`` off-workflow turns (default 0) and
a coverage of at least ``min_coverage`` (default 0.2). Both are parameters (ours), set on STAR's
human dialogues, where users volunteer slots the agent then need not ask for and an agent says two
steps in one turn (the assigner maps it to one): of the 1,060 gold-conformant human dialogues
(``picked`` text), 92.5% have no off-workflow turn and 86.8% pass both (5.8% say less than 20% of
the happy path); every template D+ of ``make demo``'s corpus passes, while 92% of its WIC forks,
81% of its CSC forks and 57% of its GR forks would be flagged (docs/spec.md, "Checked conformant
dialogues"; ``benchmarks/bench_conformance_check.py``).

``generation`` cannot import this package (the layering: ``dialfork_metrics`` builds on
``generation.api``, never the reverse), so the engine finds the check by name through the
``dialfork.conformance`` entry point group (``workflow-nodes`` here, declared in setup.cfg) and
calls the :class:`ConformanceCheck` protocol documented in :mod:`generation.conformance`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

logger = logging.getLogger("dialfork_metrics.task3.workflow.conformance")

CHECK_NAME = "workflow-nodes"
"""The check's entry-point name (``python -m generation --check-conformance workflow-nodes``)."""
DEFAULT_MIN_COVERAGE = 0.2
"""Least share of the happy path's content steps a conformant D+ says (ours)."""
DEFAULT_MAX_OFF_WORKFLOW = 0
"""Most system turns of another workflow a conformant D+ holds (ours)."""


def judge(
    coverage: Mapping[str, Any],
    off_workflow: Sequence[int],
    min_coverage: float = DEFAULT_MIN_COVERAGE,
    max_off_workflow: int = DEFAULT_MAX_OFF_WORKFLOW,
) -> bool:
    """The conformance rule over a dialogue's step coverage and off-workflow turns.

    Args:
        coverage: The step coverage (:func:`~dialfork_metrics.task3.workflow.coverage.step_coverage`), read for
            its ``coverage`` share.
        off_workflow: The off-workflow system turns.
        min_coverage: Least coverage.
        max_off_workflow: Most off-workflow turns.

    Returns:
        bool: Whether the dialogue counts as conformant.

    Example:
        >>> judge({"coverage": 0.8}, []), judge({"coverage": 0.8}, [3]), judge({"coverage": 0.2}, [])
        (True, False, False)
    """
    return len(off_workflow) <= max_off_workflow and float(coverage["coverage"]) >= min_coverage


class WorkflowConformance:
    """The ``workflow-nodes`` check of generated D+ (the engine's :class:`ConformanceCheck`).

    Args:
        encoder: Encoder alias, path or object with ``encode(texts)`` (unit-norm rows); default the
            packaged MiniLM.
        min_coverage: Least share of the happy path's content steps (ours, 0.2).
        max_off_workflow: Most off-workflow system turns (ours, 0).
        min_similarity: The node assigner's own-workflow floor; None (default) reads it off the
            workflow's own phrasings (:func:`~dialfork_metrics.task3.workflow.rules.auto_min_similarity`).
        step_reader: The learned step reader of the node assigner (``"auto"``: the shipped one, used
            when the encoder is the packaged MiniLM; a folder; None, the default: cosine only, as
            ``wf``'s default).

    Fitted attributes (after :meth:`fit`): ``assigner_`` (the fitted node assigner) and ``models_``
    (task -> its workflow model, for the happy path).

    Example:
        >>> from dialfork_dataset.star import StarCorpus                     # doctest: +SKIP
        >>> check = WorkflowConformance().fit(StarCorpus("../shared/star"), ["weather"])  # doctest: +SKIP
        >>> check.check("weather", ["Hello, how can I help?", "Could I get your PIN?"])["off_workflow"]  # doctest: +SKIP
        [2]
    """

    name = CHECK_NAME

    def __init__(
        self,
        encoder: Any = "minilm",
        min_coverage: float = DEFAULT_MIN_COVERAGE,
        max_off_workflow: int = DEFAULT_MAX_OFF_WORKFLOW,
        min_similarity: float | None = None,
        step_reader: str | None = None,
    ):
        self.encoder = encoder
        self.min_coverage = min_coverage
        self.max_off_workflow = max_off_workflow
        self.min_similarity = min_similarity
        self.step_reader = step_reader

    def _check_params(self) -> None:
        errs = []
        if (
            isinstance(self.min_coverage, bool)
            or not isinstance(self.min_coverage, int | float)
            or not 0.0 <= self.min_coverage <= 1.0
        ):
            errs.append(f"min_coverage must be a number in [0, 1], got {self.min_coverage!r}")
        if (
            isinstance(self.max_off_workflow, bool)
            or not isinstance(self.max_off_workflow, int)
            or self.max_off_workflow < 0
        ):
            errs.append(f"max_off_workflow must be an integer >= 0, got {self.max_off_workflow!r}")
        if self.min_similarity is not None and (
            isinstance(self.min_similarity, bool) or not isinstance(self.min_similarity, int | float)
        ):
            errs.append(f"min_similarity must be a number or None, got {self.min_similarity!r}")
        if errs:
            raise ValueError("WorkflowConformance: " + "; ".join(errs))

    def fit(self, source: Any, tasks: Sequence[str] | None = None) -> WorkflowConformance:
        """Read the workflows: every task of ``source`` (the rivals), the happy paths of ``tasks``.

        Args:
            source: A workflow source (:class:`~dialfork_dataset.star.StarCorpus` or a workflow
                file's corpus).
            tasks: The tasks whose dialogues will be checked (default: all of the source).

        Returns:
            self.

        Raises:
            ValueError: Invalid parameters or an unknown task.
            WorkflowTextError: A step without text (every one named).
        """
        from generation.api import TemplateBackend

        from .rules import fit_workflow_assigner

        self._check_params()
        names = list(source.tasks) if tasks is None else list(tasks)
        unknown = [t for t in names if t not in source.tasks]
        if unknown:
            raise ValueError(
                f"WorkflowConformance.fit: unknown task(s) {', '.join(map(repr, unknown))}; the source "
                f"has {', '.join(sorted(source.tasks))}"
            )
        assigner = fit_workflow_assigner(
            source, self.encoder, self.min_similarity, getattr(self, "step_reader", None)
        )
        backend = TemplateBackend()
        backend.bind_corpus(source)
        self.models_ = {t: backend.model(source.tasks[t]) for t in names}
        self.assigner_ = assigner
        logger.info(
            "conformance check: %d task(s), own-workflow floor %.3f", len(names), assigner.min_similarity
        )
        return self

    def check_is_fitted(self) -> None:
        """Raise unless :meth:`fit` ran.

        Raises:
            sklearn.exceptions.NotFittedError: Not fitted.
        """
        if not hasattr(self, "assigner_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError("WorkflowConformance is not fitted; call fit(source, tasks) first")

    def check(self, task: str, system_turns: Sequence[str]) -> dict[str, Any]:
        """Check one dialogue's system turns against its task's workflow.

        Args:
            task: The dialogue's task (one of the fitted ones).
            system_turns: Its system turns, in order.

        Returns:
            dict: ``check`` (this check's name), ``conformant`` (bool), ``coverage`` (float),
            ``skipped`` (the happy path's content steps not said, in order), ``off_workflow``
            and ``unfamiliar`` (1-based system turns), ``reached_outcome`` (bool).

        Raises:
            KeyError: ``task`` was not fitted.
        """
        return self.check_many([(task, system_turns)])[0]

    def check_many(self, dialogues: Sequence[tuple[str, Sequence[str]]]) -> list[dict[str, Any]]:
        """Check several dialogues, their turns encoded in one batch.

        Args:
            dialogues: ``(task, system_turns)`` per dialogue.

        Returns:
            list[dict]: :meth:`check`'s dict per dialogue, in order.

        Raises:
            KeyError: A task was not fitted.
        """
        import numpy as np

        from .coverage import step_coverage

        self.check_is_fitted()
        missing = sorted({t for t, _ in dialogues if t not in self.models_})
        if missing:
            raise KeyError(
                f"task(s) {', '.join(map(repr, missing))} not fitted; fitted: {', '.join(sorted(self.models_))}"
            )
        flat = [str(x) for _, turns in dialogues for x in turns]
        E = self.assigner_.encode(flat) if flat else np.zeros((0, 1))
        out, i = [], 0
        for task, turns in dialogues:
            n = len(turns)
            a = self.assigner_.assign(task, E[i : i + n], texts=flat[i : i + n]) if n else None
            i += n
            nodes = a.nodes if a is not None else []
            reasons = a.reasons if a is not None else []
            cov = step_coverage(nodes, self.models_[task])
            off = [k + 1 for k, r in enumerate(reasons) if r == "off-task"]
            out.append(
                {
                    "check": self.name,
                    "conformant": judge(cov, off, self.min_coverage, self.max_off_workflow),
                    "coverage": round(float(cov["coverage"]), 4),
                    "skipped": list(cov["skipped"]),
                    "off_workflow": off,
                    "unfamiliar": [k + 1 for k, r in enumerate(reasons) if r == "unfamiliar"],
                    "reached_outcome": bool(cov["reached_outcome"]),
                }
            )
        return out


__all__ = ["CHECK_NAME", "DEFAULT_MAX_OFF_WORKFLOW", "DEFAULT_MIN_COVERAGE", "WorkflowConformance", "judge"]
