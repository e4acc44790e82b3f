"""Workflow sources (SPEC section 10): what generation, the prompts, the template backend, the LLM
detector and the annotation tool read about tasks, workflows and scenarios.

STAR is one source (:class:`~dialfork_dataset.star.StarCorpus`); a workflow file is another
(:class:`~dialfork_dataset.workflow.files.WorkflowCorpus`, see ``docs/workflows.md``). Both implement
:class:`WorkflowSource`. The protocols below name every attribute those consumers use, and nothing
else; ``is_source(obj)`` checks that the names are there (not their types) without reading anything.

The kinds are one :class:`~dialfork_dataset.registry.Registry` (:data:`SOURCE_KINDS` is its read-only
view; :func:`register` adds one, :func:`unregister` removes one, and an
unknown name raises :class:`~dialfork_dataset.registry.RegistryError` listing the registered kinds).

Spec strings, as the CLIs take them (``--source``)::

    star:PATH         a STAR copy (folder with tasks/ and apis/)
    workflow:PATH     a workflow file (YAML), or a folder of them (its *.yaml/*.yml files: one source)
    KIND:PATH         a kind registered with :func:`register` (:data:`SOURCE_KINDS`)
    PATH              a folder: STAR (a folder without tasks/ that holds .yaml/.yml files: workflow
                      files); a .yaml/.yml file: a workflow file

:func:`parse_source_spec` is the one parser of these strings; every CLI and library function that
takes a source spec goes through it (and :func:`open_source`). Each kind is one
:class:`SourceKind` in :data:`SOURCE_KINDS`: its opener, and what the dataset card says of the
source material (source dataset, licence, credit).

Optional parts of a source. A backend that needs one asks :meth:`WorkflowTask.missing` and
raises :class:`SourceError` naming the task and the missing field. Features:

* ``surface_templates``: a response template for every step the system says (the template
  backend realises steps from them);
* ``api``: the task's API (input slots; the template backend's user answers from them);
* ``kb``: the knowledge-base table of the task's API (values of ``{placeholders}``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from .errors import SourceError
from .registry import Registry, RegistryError, is_ref, resolve

#: The optional parts a backend may require of a task (see :meth:`WorkflowTask.missing`).
FEATURES = ("surface_templates", "api", "kb")


def path_exists(path: Path) -> bool:
    """Whether ``path`` exists (:class:`SourceKind`'s default ``available``).

    Args:
        path: The recorded source's path.

    Returns:
        bool: True when the path exists.
    """
    return Path(path).exists()


def path_stamp(path: Path) -> int:
    """The modification time of ``path`` in ns, 0 when it cannot be read (:class:`SourceKind`'s
    default ``stamp``).

    Args:
        path: The source's path.

    Returns:
        int: ``st_mtime_ns``, or 0.
    """
    try:
        return Path(path).stat().st_mtime_ns
    except OSError:
        return 0


@dataclass(frozen=True)
class SourceKind:
    """One kind of workflow source, named by its spec prefix (``KIND:PATH``).

    Attributes:
        name: the spec prefix (``star``, ``workflow``, ...).
        opener: ``"module:attr"`` (imported on first use) or a callable: ``opener(path) -> source``,
            ``path`` the resolved :class:`~pathlib.Path`.
        describe: what ``PATH`` is, in a few words (help texts and errors).
        title: the source's name as the dataset card uses it (``"the STAR scenarios"``: ``"STAR"``).
        source_dataset: the card's ``source_datasets`` entry (e.g. ``"extended|other-star"``);
            ``None``: none is declared (and the card's tags do not name the source).
        licence: the source material's licence (e.g. ``"MIT"``); ``None``: not declared.
        credit: where the material comes from, as the card's "How it was made" says it (e.g.
            ``"STAR (Mosig et al., 2020; MIT)"``).
        note: a further clause for that paragraph (e.g. that STAR's human dialogues are left out).
        available: ``available(path) -> bool``: whether a recorded source can still be opened
            (default: the path exists).
        stamp: ``stamp(path) -> int``: what changes when the source's files change, for caches
            that keep an opened source (the annotation tool's); default: the path's modification
            time.
        bare: record the spec as the bare path (STAR only, as before source kinds existed, so old
            runs resume); otherwise ``KIND:PATH``.

    Raises:
        ValueError: On construction: a name that is not an identifier of 2 characters or more, an
            opener that is neither a callable nor ``"module:attr"``, or an ``available`` or
            ``stamp`` that is not callable (the message names the kind and the field).
    """

    name: str
    opener: str | Callable[[Path], Any]
    describe: str = "a path"
    title: str = "workflow-file"
    source_dataset: str | None = None
    licence: str | None = None
    credit: str = "the workflow files given to the generator"
    note: str | None = None
    available: Callable[[Path], bool] = path_exists
    bare: bool = False
    stamp: Callable[[Path], int] = path_stamp

    def __post_init__(self) -> None:
        where = f"source kind {self.name!r}"
        if not (isinstance(self.name, str) and self.name.isidentifier() and len(self.name) > 1):
            raise ValueError(
                f"{where}: the name must be an identifier of 2 characters or more (a one-letter name "
                "would read as a Windows drive)"
            )
        if not (callable(self.opener) or is_ref(self.opener)):
            raise ValueError(
                f"{where}: opener must be a callable or 'package.module:attr', got {self.opener!r}"
            )
        for f in ("available", "stamp"):
            if not callable(getattr(self, f)):
                raise ValueError(f"{where}: {f} must be a callable taking the path, got {getattr(self, f)!r}")

    def open(self, path: Path) -> Any:
        """The source at ``path``.

        Args:
            path: the resolved path of the spec.

        Returns:
            The opener's source.

        Raises:
            ValueError: The opener's ``"module:attr"`` cannot be imported.
        """
        return resolve(self.opener, f"opener of source kind {self.name!r}")(path)


_KINDS: Registry[SourceKind] = Registry(
    "source kind", SourceKind, add_hint="dialfork_dataset.sources.register"
)

#: The source-kind registry, a read-only live mapping: spec prefix -> :class:`SourceKind`
#: (:func:`register` is the one way to add a kind).
SOURCE_KINDS: Mapping[str, SourceKind] = _KINDS.view


def register(kind: SourceKind, *, replace: bool = False) -> SourceKind:
    """Register a source kind: ``KIND:PATH`` then opens with it everywhere a spec is taken.

    Args:
        kind: the kind (its name was checked when it was built: an identifier of 2 characters or
            more, as a one-letter name would read as a Windows drive).
        replace: allow replacing a registered kind of that name (default ``False``).

    Returns:
        ``kind``.

    Raises:
        TypeError: ``kind`` is not a :class:`SourceKind`.
        RegistryError: the name is already registered and ``replace`` is false (a ``ValueError``).
    """
    return _KINDS.register(kind, replace=replace)


def unregister(name: str) -> SourceKind:
    """Remove source kind ``name``.

    Args:
        name: a registered kind's name.

    Returns:
        The removed kind.

    Raises:
        RegistryError: ``name`` is not registered (the message lists the registered kinds).
    """
    return _KINDS.unregister(name)


def names() -> tuple[str, ...]:
    """The registered source kind names, in registration order (the built-ins first).

    Returns:
        The names.
    """
    return _KINDS.names()


def get(name: str) -> SourceKind:
    """The :class:`SourceKind` registered as ``name``.

    Args:
        name: a key of :data:`SOURCE_KINDS`.

    Returns:
        The kind.

    Raises:
        RegistryError: ``name`` is not registered (a ``ValueError``; the message lists the
            registered kinds).
    """
    return _KINDS.get(name)


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

    def render_steps(
        self, with_templates: bool = True, include_other: bool = True, include_instructions: bool = True
    ) -> str:
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

    def scenarios_for(
        self, task: str | None = None, single_task: bool = True, happy: bool | None = None
    ) -> list[ScenarioLike]:
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
    """``(kind, path)`` of a spec string (see the module doc); the path is resolved. The one parser
    of source specs.

    Args:
        spec: ``KIND:PATH`` (a kind of :data:`SOURCE_KINDS`: ``star``, ``workflow``, ...) or a bare
            path (a ``.yaml``/``.yml`` name or an existing file is a workflow file, and so is a
            folder without ``tasks/`` that holds such files; anything else a STAR copy). ``~`` is
            expanded.

    Returns:
        tuple[str, Path]: ``(kind, absolute path)``; the path need not exist.

    Raises:
        SourceError: ``KIND:`` with nothing after it, or a ``WORD:PATH`` that names no registered
            kind (and no existing path): the message lists the registered kinds.
    """
    text = os.fspath(spec)
    kind, sep, rest = text.partition(":")
    if sep and kind in SOURCE_KINDS:
        if not rest:
            raise SourceError(
                f"source {text!r}: no path after '{kind}:' (give {kind}:PATH, "
                f"PATH {SOURCE_KINDS[kind].describe})"
            )
        return kind, Path(rest).expanduser().resolve()
    p = Path(text).expanduser().resolve()
    if sep and rest and kind.isidentifier() and len(kind) > 1 and not p.exists():
        raise SourceError(f"source {text!r}: {_KINDS.unknown(kind)}; give KIND:PATH with a registered KIND")
    if p.suffix.lower() in (".yaml", ".yml") or p.is_file():
        return "workflow", p
    if p.is_dir() and not (p / "tasks").is_dir() and any(p.glob("*.y*ml")):
        return "workflow", p  # a folder of workflow files
    return "star", p


def source_identity(spec: str | os.PathLike) -> str:
    """The spec in a canonical form (a generation run's identity): a STAR copy by its resolved path
    (as before sources existed, so old runs resume), any other kind as ``KIND:<resolved path>``.

    Args:
        spec: A spec string or path (see :func:`parse_source_spec`).

    Returns:
        str: The resolved path (STAR) or ``KIND:<resolved path>``.

    Raises:
        SourceError: ``KIND:`` with nothing after it.
    """
    kind, path = parse_source_spec(spec)
    return str(path) if SOURCE_KINDS[kind].bare else f"{kind}:{path}"


def source_record(spec: str | os.PathLike) -> str:
    """The spec as a generation manifest records it: the path as given (relative paths stay relative
    to the folder the command ran in, so a manifest names no machine's absolute path), prefixed
    ``KIND:`` unless the kind is STAR. Two records name the same source when their
    :func:`source_identity` is equal.

    Args:
        spec: A spec string or path (see :func:`parse_source_spec`).

    Returns:
        str: The path as given (STAR) or ``KIND:<path as given>``.

    Raises:
        SourceError: ``KIND:`` with nothing after it.
    """
    text = os.fspath(spec)
    kind, _ = parse_source_spec(text)
    prefix, sep, rest = text.partition(":")
    given = rest if sep and prefix in SOURCE_KINDS else text
    return given if SOURCE_KINDS[kind].bare else f"{kind}:{given}"


def recorded_source(spec: Any) -> str | None:
    """A recorded source spec (a generation manifest's ``config.star``), if it can still be opened.

    Args:
        spec: the recorded spec (anything: a manifest may hold any JSON).

    Returns:
        ``spec`` when it is a spec string whose kind's ``available(path)`` holds (STAR: a folder
            with ``tasks/``; other kinds: the path exists), else ``None``.
    """
    if not isinstance(spec, str) or not spec:
        return None
    try:
        kind, path = parse_source_spec(spec)
    except SourceError:
        return None
    return spec if SOURCE_KINDS[kind].available(path) else None


def card_source(spec: Any = None) -> dict[str, Any]:
    """What the dataset card says of a corpus's source material, from its kind's declaration.

    Args:
        spec: the corpus's recorded source spec (``None`` or unparseable: STAR, the corpus's
            default source).

    Returns:
        ``{"kind", "title", "source_dataset", "licence", "credit", "note"}`` of the spec's kind.
    """
    kind = "star"
    if isinstance(spec, str | os.PathLike) and os.fspath(spec):
        try:
            kind, _ = parse_source_spec(spec)
        except SourceError:
            pass
    k = SOURCE_KINDS[kind]
    return {
        "kind": k.name,
        "title": k.title,
        "source_dataset": k.source_dataset,
        "licence": k.licence,
        "credit": k.credit,
        "note": k.note,
    }


def open_source(spec: Any = None) -> WorkflowSource:
    """The source named by ``spec``: a spec string or path (module doc), an object that already is
    a source (returned as is), or None (STAR at ``$DIALFORK_STAR_DIR``).

    Args:
        spec: A spec string or path, a source object, or None.

    Returns:
        WorkflowSource: What the kind's opener returns (a :class:`~dialfork_dataset.star.StarCorpus`,
        a :class:`~dialfork_dataset.workflow.files.WorkflowCorpus`, ...), or ``spec`` itself.

    Raises:
        SourceError: ``spec`` is an object that is not a source, or an empty ``KIND:`` spec; a
            workflow file's problems (:class:`~dialfork_dataset.workflow.check.WorkflowError`, a
            subclass).
        StarError: The STAR copy is missing or wrong (or ``$DIALFORK_STAR_DIR`` is unset when
            ``spec`` is None).
    """
    if spec is not None and not isinstance(spec, (str, os.PathLike)):
        if is_source(spec):
            return spec
        raise SourceError(
            f"not a workflow source: {type(spec).__name__} (give "
            f"{', '.join(k + ':PATH' for k in SOURCE_KINDS)} or an object with tasks, domains, "
            "scenarios, length_budget, ...)"
        )
    if spec is None:
        from .star import StarCorpus

        return StarCorpus()
    kind, path = parse_source_spec(spec)
    return SOURCE_KINDS[kind].open(path)


def source_spec_of(source: Any) -> str | None:
    """The spec that reopens a source object: ``KIND:<its path>`` for an object whose class is a
    registered kind's opener and that has a ``path``.

    Args:
        source: a source object (or a spec string, returned as is).

    Returns:
        The spec, or ``None`` when no registered kind opens such objects (or it has no ``path``).
    """
    if source is None or isinstance(source, str | os.PathLike):
        return None if source is None else os.fspath(source)
    path = getattr(source, "path", None)
    for k in SOURCE_KINDS.values():
        # an object of the class was made, so its module is loaded: nothing is imported here
        opener = resolve(k.opener, f"opener of source kind {k.name!r}", loaded_only=True)
        if path is not None and isinstance(opener, type) and isinstance(source, opener):
            return f"{k.name}:{path}"
    return None


def _star_available(path: Path) -> bool:
    return (path / "tasks").is_dir()


def _star_stamp(path: Path) -> int:
    """A STAR copy changes with its ``scenarios.jsonl`` (else its folder)."""
    return path_stamp(path / "scenarios.jsonl") or path_stamp(path)


def _workflow_stamp(path: Path) -> int:
    """A workflow file's modification time; for a folder, the latest of it and its workflow files."""
    if not Path(path).is_dir():
        return path_stamp(path)
    from .workflow.files import workflow_files

    try:
        return max(path_stamp(p) for p in [Path(path), *workflow_files(path)])
    except OSError:
        return 0


#: The built-in source kinds, in the order the registry lists them.
BUILTIN_SOURCE_KINDS = (
    SourceKind(
        "star",
        "dialfork_dataset.star:StarCorpus",
        "a STAR copy (a folder with tasks/ and apis/)",
        title="STAR",
        source_dataset="extended|other-star",
        licence="MIT",
        credit="STAR (Mosig et al., 2020; MIT)",
        note="STAR's human dialogues are not part of DialFork",
        available=_star_available,
        bare=True,
        stamp=_star_stamp,
    ),
    SourceKind(
        "workflow",
        "dialfork_dataset.workflow.files:WorkflowCorpus",
        "a workflow file (YAML, docs/workflows.md) or a folder of them",
        stamp=_workflow_stamp,
    ),
)
for _kind in BUILTIN_SOURCE_KINDS:
    register(_kind)


def require(
    source: WorkflowSource,
    feature: str,
    tasks: Sequence[str] | None = None,
    *,
    needed_by: str = "this backend",
) -> None:
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
        raise SourceError(
            f"{needed_by} needs {feature.replace('_', ' ')}, which the source lacks:\n"
            + "\n".join(f"- {e}" for e in errors),
            errors,
        )


__all__ = [
    "FEATURES",
    "RegistryError",
    "SOURCE_KINDS",
    "ScenarioLike",
    "SourceError",
    "SourceKind",
    "WorkflowSource",
    "WorkflowTask",
    "card_source",
    "is_source",
    "open_source",
    "parse_source_spec",
    "recorded_source",
    "register",
    "require",
    "source_identity",
    "get",
    "names",
    "source_record",
    "source_spec_of",
    "unregister",
    "BUILTIN_SOURCE_KINDS",
    "path_stamp",
]
