"""One STAR task folder (``tasks/<name>/``): its files, its workflow graph and numbered steps."""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .api import StarApi
from .common import KNOWN_OUTCOMES, START_NODE, raise_collected, read_json, task_domain
from .graph import WorkflowBranch, WorkflowStep, describe_node, infer_branch_parents, node_kinds

if TYPE_CHECKING:  # pragma: no cover
    import networkx


@dataclass
class StarTask:
    """One STAR task folder: ``tasks/<name>/``.

    Usually made by :meth:`load` (or :class:`StarCorpus`), which validates the files.

    Attributes:
        name: The task's name (the folder's name, e.g. ``ride_book``).
        domain: Its domain (:func:`task_domain`, e.g. ``ride``).
        function: The task file's ``task`` (the API function name).
        replies: The task file's ``replies`` (node -> label or template).
        graph: The task file's ``graph`` (node -> its one "next" node).
        responses: ``responses.json`` (node -> response template); empty when absent.
        nlu: The intents of ``wizard_nlu_training_data.md`` (node -> example phrasings); empty
            when absent.
        instructions: The text of ``instructions.txt``, None when absent.
        flowchart: The ``<name>.jpg`` flowchart, None when absent.
        api: The task's knowledge-base API, None when the copy has none for it.
        start_node: The workflow's start node (``"hello"``).
    """

    name: str
    domain: str
    function: str
    replies: dict[str, str]
    graph: dict[str, str]
    responses: dict[str, str]
    nlu: dict[str, list[str]]
    instructions: str | None = None
    flowchart: Path | None = None
    api: StarApi | None = None
    start_node: str = START_NODE

    @classmethod
    def load(
        cls, task_dir: str | os.PathLike, api: StarApi | None = None, errors: list[str] | None = None
    ) -> StarTask | None:
        """Read ``task_dir``. With ``errors`` given, problems are appended there and None is returned;
        otherwise a :class:`StarError` listing every problem of the folder is raised.

        Args:
            task_dir: The task folder ``tasks/<name>/`` (it must hold ``<name>.json``).
            api: The task's API (from ``apis/apis/<name>.json``), if any.
            errors: A list to collect problems in (``"file: problem"`` lines); None raises instead.

        Returns:
            StarTask | None: The task; None when it has a problem and ``errors`` was given.

        Raises:
            StarError: Without ``errors``: the folder has a problem (a missing or malformed task
                file, ``replies``/``graph`` not objects of strings, no ``task``, no start node, an
                edge to an unknown node, a bad ``responses.json`` or NLU file); every problem is
                listed.
        """
        own = errors is None
        errs: list[str] = [] if own else errors
        n0 = len(errs)
        task_dir = Path(task_dir)
        name = task_dir.name
        main = task_dir / f"{name}.json"
        data = read_json(main, errs, f"task file (expected tasks/{name}/{name}.json)")
        task = None
        if data is not None:
            task = cls._from_parts(name, task_dir, main, data, api, errs)
        if own:
            raise_collected(errs[n0:], f"STAR task {task_dir}")
        return task if len(errs) == n0 else None

    @classmethod
    def _from_parts(
        cls, name: str, task_dir: Path, main: Path, data: Any, api: StarApi | None, errs: list[str]
    ) -> StarTask | None:
        n0 = len(errs)
        if not isinstance(data, dict):
            errs.append(
                f"{main}: expected a JSON object with 'task', 'replies', 'graph', got {type(data).__name__}"
            )
            return None
        for key in ("replies", "graph"):
            val = data.get(key)
            if not isinstance(val, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in val.items()
            ):
                errs.append(f"{main}: {key!r} missing or not an object of strings (node -> text/node)")
        resp_path = task_dir / "responses.json"
        responses = None
        if resp_path.exists():
            responses = read_json(resp_path, errs, "responses file")
            if responses is not None and not (
                isinstance(responses, dict) and all(isinstance(v, str) for v in responses.values())
            ):
                errs.append(f"{resp_path}: expected an object node -> response template")
                responses = None
        if not isinstance(data.get("task"), str):
            errs.append(f"{main}: 'task' (the API function name) missing or not a string")
        if not all(isinstance(data.get(k), dict) for k in ("replies", "graph")):
            return None
        replies, graph = data["replies"], data["graph"]
        if not all(isinstance(v, str) for v in (*replies.values(), *graph.values())):
            return None
        known = set(replies) | set(responses or {})
        if START_NODE not in known and START_NODE not in graph:
            errs.append(f"{main}: no start node {START_NODE!r} in 'replies' or 'graph'")
        for src, dst in graph.items():
            for node, role in ((src, "source"), (dst, "target")):
                if node in known or node.startswith("query") or node in KNOWN_OUTCOMES:
                    continue
                errs.append(
                    f"{main}: graph edge {src!r} -> {dst!r}: unknown {role} node {node!r} "
                    "(no reply in 'replies' or responses.json, and not a query/branch node)"
                )
        nlu = _parse_nlu(task_dir / "wizard_nlu_training_data.md", errs)
        instr_path = task_dir / "instructions.txt"
        instructions = instr_path.read_text(encoding="utf-8").strip() if instr_path.exists() else None
        jpg = task_dir / f"{name}.jpg"
        if len(errs) > n0:
            return None
        return cls(
            name=name,
            domain=task_domain(name),
            function=data["task"],
            replies=dict(replies),
            graph=dict(graph),
            responses=dict(responses or {}),
            nlu=nlu,
            instructions=instructions,
            flowchart=jpg if jpg.exists() else None,
            api=api,
        )

    # ---- what backends need (dialfork_dataset.sources.WorkflowTask)

    def missing(self, feature: str, dbs: dict[str, Any] | None = None) -> list[str]:
        """The fields of ``feature`` (``surface_templates``, ``api``, ``kb``; see
        :mod:`dialfork_dataset.sources`) this task lacks, as "where (field)" strings; [] if none.

        Args:
            feature: ``"surface_templates"`` (a response template for every action step),
                ``"api"`` (an API file) or ``"kb"`` (the API's knowledge base in ``dbs``).
            dbs: The knowledge bases available (name -> data, e.g. :attr:`StarCorpus.dbs`); used by
                ``"kb"`` only, where None means none is available.

        Returns:
            list[str]: One "what (where)" line per missing piece; empty when nothing is missing.

        Raises:
            ValueError: ``feature`` is not one of the three.
        """
        if feature == "surface_templates":
            steps = [n for n in walk_order(self.steps()) if self.kinds.get(n) == "action"]
            return [
                f"response template of step {n!r} (responses.json or 'replies' of {self.name}.json)"
                for n in steps
                if not self.template(n)
            ]
        if feature == "api":
            return [] if self.api is not None else [f"API (apis/apis/{self.name}.json)"]
        if feature == "kb":
            if self.api is None:
                return [f"API (apis/apis/{self.name}.json), which names the knowledge base"]
            return (
                []
                if dbs is not None and (self.api.db in dbs or self.domain in dbs)
                else [f"knowledge base {self.api.db!r} (apis/dbs/{self.api.db}.json)"]
            )
        raise ValueError(f"unknown feature {feature!r}; known: surface_templates, api, kb")

    # ---- structure

    @cached_property
    def kinds(self) -> dict[str, str]:
        """Node -> ``action`` | ``query`` | ``branch`` (see :func:`node_kinds`)."""
        return node_kinds(self.replies, self.graph, self.responses or None, self.start_node)

    @cached_property
    def branch_parents(self) -> dict[str, list[str]]:
        """Branch node -> the node(s) it is an outcome of (see :func:`infer_branch_parents`)."""
        return infer_branch_parents(self.replies, self.graph, self.kinds, self.start_node)

    def describe(self, node: str) -> str:
        """The plain-language text of a step (:func:`describe_node`, from the node's name and kind).

        Args:
            node: A node of the workflow (an unknown node is described as an action).

        Returns:
            str: The description (a query names the task's API function).
        """
        kind = self.kinds.get(node, "action")
        return describe_node(node, kind, self.domain, self.function if kind == "query" else "")

    def template(self, node: str) -> str | None:
        """The response template of an action node (responses.json, else replies), None for others.

        Args:
            node: A node of the workflow.

        Returns:
            str | None: The template; None for a query, branch or unknown node, or an action with
            neither a response nor a reply.
        """
        if self.kinds.get(node) != "action":
            return None
        return self.responses.get(node, self.replies.get(node))

    def digraph(self) -> networkx.DiGraph:
        """The workflow as a ``networkx.DiGraph``.

        Nodes: every node of ``replies``/``responses``/``graph``, with attributes ``reply`` (text of
        ``replies``), ``template`` (response template, actions only), ``kind``, ``reachable`` (from
        ``hello``) and, for branch nodes, ``attached`` (a parent was inferred). Edges: the "next" edges
        of ``graph`` (``edge="next"``) and the inferred outcome edges parent -> branch
        (``edge="outcome"``).

        Returns:
            networkx.DiGraph: A new graph, with graph attributes ``task``, ``domain``, ``function``
            and ``start``.
        """
        import networkx as nx

        g = nx.DiGraph(task=self.name, domain=self.domain, function=self.function, start=self.start_node)
        for n, kind in self.kinds.items():
            g.add_node(n, reply=self.replies.get(n), template=self.template(n), kind=kind)
        for src, dst in self.graph.items():
            g.add_edge(src, dst, edge="next")
        for b, ps in self.branch_parents.items():
            g.nodes[b]["attached"] = bool(ps)
            for p in ps:
                g.add_edge(p, b, edge="outcome")
        reach = nx.descendants(g, self.start_node) | {self.start_node} if self.start_node in g else set()
        for n in g.nodes:
            g.nodes[n]["reachable"] = n in reach
        return g

    @property
    def end_nodes(self) -> list[str]:
        """Reachable nodes with no successor, in workflow order."""
        g = self.digraph()
        order = walk_order(self.steps())
        return [n for n in order if g.out_degree(n) == 0]

    def other_nodes(self) -> list[str]:
        """Actions not reachable from ``hello`` (``out_of_scope``, ``*_nothing_found``, ``*_bye``...):
        responses the system may use at any point.

        Returns:
            list[str]: Those action nodes, in :attr:`kinds` order.
        """
        g = self.digraph()
        return [n for n, d in g.nodes(data=True) if d["kind"] == "action" and not d["reachable"]]

    def steps(self) -> list[WorkflowStep]:
        """Numbered steps from ``hello``; outcomes nested as :class:`WorkflowBranch`.

        Numbers follow a depth-first walk (a branch's steps come before the steps after the
        branching step). A branch's chain stops where it rejoins the main line of an enclosing step
        ("continue with step N"), and a node met again on the current path is a loop ("go back to
        step N"); both are ``goto`` steps. Cycles therefore terminate.

        Returns:
            list[WorkflowStep]: The main line's steps, each with its ``branches`` nested.
        """
        children: dict[str, list[str]] = defaultdict(list)
        for b, ps in self.branch_parents.items():
            for p in ps:
                children[p].append(b)
        numbered: dict[str, int] = {}
        gotos: list[tuple[WorkflowStep, bool]] = []
        counter = [0]
        kinds = self.kinds

        def main_line(node: str | None) -> set[str]:
            out: set[str] = set()
            while node is not None and node not in out:
                out.add(node)
                node = self.graph.get(node)
            return out

        def walk(node: str | None, path: tuple[str, ...], pending: frozenset[str]) -> list[WorkflowStep]:
            out: list[WorkflowStep] = []
            while node is not None:
                if node in numbered or node in pending:
                    loop = node in path
                    step = WorkflowStep(number=0, node=node, kind=kinds.get(node, "action"), text="", goto=0)
                    gotos.append((step, loop))
                    out.append(step)
                    break
                if kinds.get(node) == "branch":  # a branch used as a "next": follow it
                    node = self.graph.get(node)
                    continue
                counter[0] += 1
                numbered[node] = counter[0]
                kids = children.get(node, [])
                kind = kinds.get(node, "action")
                if kind == "action" and kids:
                    kind = "branch"
                step = WorkflowStep(
                    number=counter[0],
                    node=node,
                    kind=kind,
                    text=self.describe(node),
                    template=self.template(node),
                )
                out.append(step)
                path = (*path, node)
                nxt = self.graph.get(node)
                inner = pending | main_line(nxt)
                for b in kids:
                    step.branches.append(
                        WorkflowBranch(
                            label=b, text=self.replies.get(b, b), steps=walk(self.graph.get(b), path, inner)
                        )
                    )
                node = nxt
            return out

        steps = walk(self.start_node, (), frozenset())
        for step, loop in gotos:
            n = numbered[step.node]
            step.number = step.goto = n
            step.text = f"{'Go back to' if loop else 'Continue with'} step {n}"
        return steps

    def render_steps(
        self, with_templates: bool = True, include_other: bool = True, include_instructions: bool = True
    ) -> str:
        """The workflow as numbered plain-language text (for LLM prompts and annotators).

        Each step shows its node id in brackets and, with ``with_templates``, its response template;
        outcomes are indented under their step. ``include_other`` appends the responses usable at any
        point (:meth:`other_nodes`); ``include_instructions`` appends ``instructions.txt`` if any.

        Args:
            with_templates: Show each step's response template after it.
            include_other: Append the responses usable at any point.
            include_instructions: Append the task's ``instructions.txt`` (when it has one).

        Returns:
            str: The text, one line per step or outcome.
        """
        lines: list[str] = []

        def fmt(steps: list[WorkflowStep], indent: str) -> None:
            for s in steps:
                if s.goto is not None:
                    lines.append(f"{indent}{s.text}.")
                    continue
                line = f"{indent}{s.number}. {s.text} [{s.node}]"
                if with_templates and s.template:
                    line += f': "{_one_line(s.template)}"'
                lines.append(line)
                for b in s.branches:
                    lines.append(f'{indent}   - If the outcome is "{_one_line(b.text)}" [{b.label}]:')
                    if b.steps:
                        fmt(b.steps, indent + "      ")
                    else:
                        lines.append(f"{indent}      (no further step)")

        fmt(self.steps(), "")
        if include_other:
            others = self.other_nodes()
            if others:
                lines.append("Responses usable at any point:")
                for n in others:
                    line = f"- {self.describe(n)} [{n}]"
                    if with_templates and self.template(n):
                        line += f': "{_one_line(self.template(n))}"'
                    lines.append(line)
        if include_instructions and self.instructions:
            lines.append("Additional instructions:")
            lines.append(self.instructions)
        return "\n".join(lines)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def walk_order(steps: list[WorkflowStep]) -> list[str]:
    """The nodes of numbered steps in step-number order (depth first), ``goto`` steps left out.

    Args:
        steps: Steps as :meth:`StarTask.steps` returns them.

    Returns:
        list[str]: Each numbered step's node once.
    """
    out: list[str] = []
    for s in steps:
        if s.goto is None:
            out.append(s.node)
        for b in s.branches:
            out.extend(walk_order(b.steps))
    return out


def _parse_nlu(path: Path, errors: list[str]) -> dict[str, list[str]]:
    """``## intent:<node>`` sections of a Rasa NLU markdown file -> node -> example phrasings."""
    if not path.exists():
        return {}
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        errors.append(f"{path}: unreadable NLU file ({e})")
        return {}
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("##"):
            head = s.lstrip("#").strip()
            current = (
                out.setdefault(head.split(":", 1)[1].strip(), []) if head.startswith("intent:") else None
            )
        elif current is not None and s.startswith("- "):
            current.append(s[2:].strip())
    return out
