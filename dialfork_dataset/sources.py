"""Workflow sources (SPEC section 10): what generation, the prompts, the template backend, the LLM
detector and the annotation tool read about tasks, workflows and scenarios.

STAR is one source (:class:`~dialfork_dataset.star.StarCorpus`); a workflow file is another
(:class:`~dialfork_dataset.workflow.WorkflowCorpus`, see ``docs/workflows.md``). Both implement
:class:`WorkflowSource`. The protocols below name every attribute those consumers use, and nothing
else; ``is_source(obj)`` checks that the names are there (not their types) without reading anything.

Spec strings, as the CLIs take them (``--source``)::

    star:PATH         a STAR copy (folder with tasks/ and apis/)
    workflow:PATH     a workflow file (YAML), or a folder of them (its *.yaml/*.yml files: one source)
    PATH              a folder: STAR (a folder without tasks/ that holds .yaml/.yml files: workflow
                      files); a .yaml/.yml file: a workflow file

Optional parts of a source. A backend that needs one asks :meth:`WorkflowTask.missing` and
raises :class:`SourceError` naming the task and the missing field. Features:

* ``surface_templates``: a response template for every step the system says (the template
  backend realises steps from them);
* ``api``: the task's API (input slots; the template backend's user answers from them);
* ``kb``: the knowledge-base table of the task's API (values of ``{placeholders}``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from .errors import SourceError

#: The optional parts a backend may require of a task (see :meth:`WorkflowTask.missing`).
FEATURES = ("surface_templates", "api", "kb")
SOURCE_KINDS = ("star", "workflow")


@runtime_checkable
class ScenarioLike(Protocol):
    """One scenario: who the user is and what they want (user goal, slot values, persona).

    Attributes:
        scenario_id: The scenario's id.
        tasks: The task(s) the scenario involves.
        domains: Their domain(s).
        happy: Happy scenarios get what they ask for; unhappy ones may meet a failing query.
        multitask: Whether the scenario is flagged multi-task.
        user_task: The user's goal (with the persona), as the user agent is told it.
        wizard_task: What the system agent is told about the task.
        user_guide: Further instructions to the user agent (one per line).
        single_task: One task and not flagged multi-task (property).
        task: The one task (property; raises for a multi-task scenario).
    """

    scenario_id: str
    tasks: tuple[str, ...]
    domains: tuple[str, ...]
    happy: bool
    """Happy scenarios get what they ask for; unhappy ones may meet a failing query."""
    multitask: bool
    user_task: str
    """The user's goal (with the persona), as the user agent is told it."""
    wizard_task: str
    """What the system agent is told about the task."""
    user_guide: tuple[str, ...]
    """Further instructions to the user agent (one per line)."""

    @property
    def single_task(self) -> bool: ...

    @property
    def task(self) -> str: ...


@runtime_checkable
class WorkflowTask(Protocol):
    """One task's workflow: nodes, ``next`` edges, outcome branches, templates, API.

    Attributes:
        name: The task's name.
        domain: Its domain.
        function: The API function the task calls.
        start_node: The workflow's start node.
        graph: node -> its one ``next`` node.
        replies: node -> its label (flowchart text; for actions, what the system says).
        responses: action node -> its response template.
        nlu: action node -> other phrasings of its response.
        api: The task's API (``inputs``/``outputs``/``required``/``db``) or None.
        instructions: Extra instructions for the task, or None.
        flowchart: A flowchart image, or None.
    """

    name: str
    domain: str
    function: str
    """The API function the task calls."""
    start_node: str
    graph: Mapping[str, str]
    """node -> its one ``next`` node."""
    replies: Mapping[str, str]
    """node -> its label (flowchart text; for actions, what the system says)."""
    responses: Mapping[str, str]
    """action node -> its response template (surface template of the step)."""
    nlu: Mapping[str, Sequence[str]]
    """action node -> other phrasings of its response."""
    api: Any
    """:class:`~dialfork_dataset.star.StarApi` (``inputs``/``outputs``/``required``/``db``) or None."""
    instructions: str | None
    flowchart: Path | None

    @property
    def kinds(self) -> Mapping[str, str]:
        """node -> ``action`` | ``query`` | ``branch``."""

    @property
    def branch_parents(self) -> Mapping[str, list[str]]:
        """branch node (an outcome label) -> the node(s) it is an outcome of."""

    def template(self, node: str) -> str | None:
        """The response template of an action node; None for other nodes.

        Args:
            node: A node of the workflow.

        Returns:
            str | None: The template, or None.
        """
        ...

    def digraph(self) -> Any:
        """The workflow as a ``networkx.DiGraph`` (``edge`` = ``next`` | ``outcome``)."""

    def steps(self) -> list[Any]:
        """Numbered steps with nested branches (:class:`~dialfork_dataset.star.WorkflowStep`)."""

    def render_steps(self, with_templates: bool = True, include_other: bool = True,
                     include_instructions: bool = True) -> str:
        """The workflow as numbered plain-language text (for LLM prompts and annotators).

        Args:
            with_templates: Show each step's response template.
            include_other: Append the responses usable at any point (:meth:`other_nodes`).
            include_instructions: Append the task's instructions, if any.

        Returns:
            str: The text.
        """
        ...

    def other_nodes(self) -> list[str]:
        """Actions not reachable from the start node: responses usable at any point.

        Returns:
            list[str]: Their node names.
        """
        ...

    def missing(self, feature: str, dbs: Mapping[str, Any] | None = None) -> list[str]:
        """Fields of ``feature`` (:data:`FEATURES`) this task lacks ([] when complete).

        Args:
            feature: One of :data:`FEATURES`.
            dbs: The source's knowledge-base tables (for ``"kb"``); None when there are none.

        Returns:
            list[str]: One line per missing field; empty when complete.
        """


@runtime_checkable
class WorkflowSource(Protocol):
    """Tasks and domains, each task's workflow, scenarios, length budgets, KB tables.

    Attributes:
        tasks: Task name -> its :class:`WorkflowTask`.
        domains: Domain -> its task names.
        scenarios: Every scenario (property).
        dbs: KB table name -> its schema (property).
    """

    tasks: Mapping[str, WorkflowTask]
    domains: Mapping[str, list[str]]
    """domain -> its task names."""

    @property
    def scenarios(self) -> list[ScenarioLike]: ...

    @property
    def dbs(self) -> Mapping[str, Any]:
        """KB table name -> its schema, a list of fields ``{Name, Type, Categories|Min|Max}``."""

    def task(self, name: str) -> WorkflowTask:
        """The task named ``name`` (an unknown name raises :class:`SourceError` or a subclass of
        :class:`~dialfork_dataset.errors.CollectedErrors`, e.g. ``StarError``).

        Args:
            name: A task name.

        Returns:
            WorkflowTask: The task.
        """
        ...

    def scenario(self, scenario_id: str | int) -> ScenarioLike:
        """The scenario with id ``scenario_id`` (compared as a string).

        Args:
            scenario_id: A scenario id.

        Returns:
            ScenarioLike: The scenario.
        """
        ...

    def scenarios_for(self, task: str | None = None, single_task: bool = True,
                      happy: bool | None = None) -> list[ScenarioLike]:
        """The scenarios of ``task``, filtered.

        Args:
            task: A task name; None for every task.
            single_task: Keep single-task scenarios only.
            happy: Keep scenarios with this ``happy`` flag; None keeps both.

        Returns:
            list[ScenarioLike]: The matching scenarios.
        """
        ...

    def length_budget(self, task: str) -> int:
        """Maximum dialogue length in turns (both speakers); at it both agents wrap up.

        Args:
            task: A task name.

        Returns:
            int: The budget, in turns.
        """


_SOURCE_NAMES = ("tasks", "domains", "scenarios", "dbs", "task", "scenario", "scenarios_for", "length_budget")


def is_source(obj: Any) -> bool:
    """Whether ``obj`` has every name of :class:`WorkflowSource`. Unlike ``isinstance`` on the
    protocol (Python 3.11 evaluates each attribute), this reads nothing: lazy parts stay unread.

    Args:
        obj: Any object.

    Returns:
        bool: True when ``tasks``, ``domains``, ``scenarios``, ``dbs``, ``task``, ``scenario``,
        ``scenarios_for`` and ``length_budget`` are all attributes of its type or instance.
    """
    return all(hasattr(type(obj), n) or n in getattr(obj, "__dict__", {}) for n in _SOURCE_NAMES)


def parse_source_spec(spec: str | os.PathLike) -> tuple[str, Path]:
    """``(kind, path)`` of a spec string (see the module doc); the path is resolved.

    Args:
        spec: ``star:PATH``, ``workflow:PATH`` or a bare path (a ``.yaml``/``.yml`` name or an
            existing file is a workflow file, and so is a folder without ``tasks/`` that holds
            such files; anything else a STAR copy). ``~`` is expanded.

    Returns:
        tuple[str, Path]: ``("star" | "workflow", absolute path)``; the path need not exist.

    Raises:
        SourceError: ``star:`` or ``workflow:`` with nothing after it.
    """
    text = os.fspath(spec)
    kind, sep, rest = text.partition(":")
    if sep and kind in SOURCE_KINDS:
        if not rest:
            raise SourceError(f"source {text!r}: no path after '{kind}:'")
        return kind, Path(rest).expanduser().resolve()
    p = Path(text).expanduser().resolve()
    if p.suffix.lower() in (".yaml", ".yml") or p.is_file():
        return "workflow", p
    if p.is_dir() and not (p / "tasks").is_dir() and any(p.glob("*.y*ml")):
        return "workflow", p  # a folder of workflow files
    return "star", p


def source_identity(spec: str | os.PathLike) -> str:
    """The spec in a canonical form (a generation run's identity): a STAR copy by its resolved path
    (as before sources existed, so old runs resume), a workflow file as ``workflow:<resolved path>``.

    Args:
        spec: A spec string or path (see :func:`parse_source_spec`).

    Returns:
        str: The resolved path (STAR) or ``workflow:<resolved path>``.

    Raises:
        SourceError: ``star:`` or ``workflow:`` with nothing after it.
    """
    kind, path = parse_source_spec(spec)
    return str(path) if kind == "star" else f"workflow:{path}"


def source_record(spec: str | os.PathLike) -> str:
    """The spec as a generation manifest records it: the path as given (relative paths stay relative
    to the folder the command ran in, so a manifest names no machine's absolute path), a workflow
    file prefixed ``workflow:``. Two records name the same source when their
    :func:`source_identity` is equal.

    Args:
        spec: A spec string or path (see :func:`parse_source_spec`).

    Returns:
        str: The path as given (STAR) or ``workflow:<path as given>``.

    Raises:
        SourceError: ``star:`` or ``workflow:`` with nothing after it.
    """
    text = os.fspath(spec)
    kind, _ = parse_source_spec(text)
    prefix, sep, rest = text.partition(":")
    given = rest if sep and prefix in SOURCE_KINDS else text
    return given if kind == "star" else f"workflow:{given}"


def open_source(spec: Any = None) -> WorkflowSource:
    """The source named by ``spec``: a spec string or path (module doc), an object that already is
    a source (returned as is), or None (STAR at ``$DIALFORK_STAR_DIR``).

    Args:
        spec: A spec string or path, a source object, or None.

    Returns:
        WorkflowSource: A :class:`~dialfork_dataset.star.StarCorpus`, a
        :class:`~dialfork_dataset.workflow.WorkflowCorpus`, or ``spec`` itself.

    Raises:
        SourceError: ``spec`` is an object that is not a source, or an empty ``star:`` /
            ``workflow:`` spec; a workflow file's problems
            (:class:`~dialfork_dataset.workflow_check.WorkflowError`, a subclass).
        StarError: The STAR copy is missing or wrong (or ``$DIALFORK_STAR_DIR`` is unset when
            ``spec`` is None).
    """
    if spec is not None and not isinstance(spec, (str, os.PathLike)):
        if is_source(spec):
            return spec
        raise SourceError(f"not a workflow source: {type(spec).__name__} (give star:PATH, workflow:PATH or an "
                          "object with tasks, domains, scenarios, length_budget, ...)")
    if spec is None:
        from .star import StarCorpus

        return StarCorpus()
    kind, path = parse_source_spec(spec)
    if kind == "workflow":
        from .workflow import WorkflowCorpus

        return WorkflowCorpus(path)
    from .star import StarCorpus

    return StarCorpus(path)


def require(source: WorkflowSource, feature: str, tasks: Sequence[str] | None = None, *,
            needed_by: str = "this backend") -> None:
    """Raise :class:`SourceError` naming every task (of ``tasks``, default all) and field that
    ``feature`` lacks.

    Args:
        source: The workflow source.
        feature: One of :data:`FEATURES`.
        tasks: The task names to check; None checks every task of ``source``.
        needed_by: Who needs the feature, for the message (e.g. ``"the template backend"``).

    Raises:
        ValueError: ``feature`` is not one of :data:`FEATURES`.
        SourceError: A task lacks a field of ``feature`` (every task and field listed).
        KeyError: A name of ``tasks`` is not a task of ``source``.
    """
    if feature not in FEATURES:
        raise ValueError(f"unknown feature {feature!r}; known: {FEATURES}")
    errors = []
    for name in tasks if tasks is not None else sorted(source.tasks):
        for f in source.tasks[name].missing(feature, source.dbs):
            errors.append(f"task {name}: missing {f}")
    if errors:
        raise SourceError(f"{needed_by} needs {feature.replace('_', ' ')}, which the source lacks:\n"
                          + "\n".join(f"- {e}" for e in errors), errors)


__all__ = ["FEATURES", "ScenarioLike", "SourceError", "WorkflowSource", "is_source", "WorkflowTask",
           "open_source", "parse_source_spec", "require", "source_identity", "source_record"]
