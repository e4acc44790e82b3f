"""The structure of a STAR workflow: node kinds, inferred outcome branches, numbered steps, and
the plain-language description of a node."""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from dataclasses import dataclass, field

from .common import ANSWER_FAMILIES, GLOBAL_RE, KNOWN_OUTCOMES, QUERY_OUTCOME_FAMILIES, START_NODE

log = logging.getLogger(__name__)


@dataclass
class WorkflowBranch:
    """One outcome of a step: ``label`` is the branch node (``available``, ``yes``...), ``text`` its
    label in the task file (``Available``...), ``steps`` what follows (nested).

    Attributes:
        label: The branch node's name (e.g. ``available``, ``yes``, ``info_missing``).
        steps: The steps that follow this outcome (may hold ``goto`` references).
        text: The branch's label in the task file's ``replies``; ``""`` when it has none.
    """

    label: str
    steps: list[WorkflowStep] = field(default_factory=list)
    text: str = ""


@dataclass
class WorkflowStep:
    """A numbered step of a workflow.

    ``kind`` is ``"query"`` for a knowledge-base query node, ``"branch"`` for an action whose outcome
    decides the next step (it has ``branches``), ``"action"`` otherwise. A step with ``goto`` set is a
    reference to an earlier step (a loop or a merge), not a new step: ``number == goto``.

    Attributes:
        number: The step's number (1-based, in the order the steps are first reached).
        node: The workflow node's name.
        kind: ``"action"``, ``"query"`` or ``"branch"`` (see above).
        text: A plain-language description of the node (:func:`describe_node`).
        template: The node's response template from the task file, None when it has none.
        branches: The outcomes of a ``"branch"`` step; empty otherwise.
        goto: The number of the earlier step this one refers to, or None for a new step.
    """

    number: int
    node: str
    kind: str
    text: str
    template: str | None = None
    branches: list[WorkflowBranch] = field(default_factory=list)
    goto: int | None = None


def _is_global(node: str) -> bool:
    return bool(GLOBAL_RE.search(node))


def node_kinds(
    replies: dict[str, str], graph: dict[str, str], responses: dict[str, str] | None, start: str = START_NODE
) -> dict[str, str]:
    """``action`` / ``query`` / ``branch`` for every node of ``replies``, ``responses`` and ``graph``.

    Nodes of ``responses.json`` (what the system role could say) are actions. Query nodes are the
    other nodes named ``query``/``query_*`` that are the "next" of some node or whose label starts
    with "Query" (``query``, ``query_check``, ``query_book``). Branch nodes are never the "next" of
    a node, are not the start, and are either a known outcome label (``yes``, ``available``,
    ``query_success``...) or a key of ``graph`` whose label is bare (no ``{slot}``, no final
    punctuation: ``info_missing``). Everything else is an action (e.g. ``*_nothing_found``, which
    has a reply but no edge).

    Args:
        replies: The task file's ``replies`` (node -> label or template).
        graph: The task file's ``graph`` (node -> its one "next" node).
        responses: The task's ``responses.json`` (node -> what the system may say); None when the
            task has none.
        start: The start node; never a branch. Default ``"hello"``.

    Returns:
        dict[str, str]: Every node of ``replies``, ``responses`` and ``graph`` (keys and values),
        in first-seen order, mapped to ``"action"``, ``"query"`` or ``"branch"``.
    """
    targets = set(graph.values())
    nodes = list(dict.fromkeys([*replies, *(responses or {}), *graph, *graph.values()]))
    kinds: dict[str, str] = {}
    for n in nodes:
        label = (replies.get(n) or "").strip()
        bare = "{" not in label and not label.endswith((".", "?", "!"))
        if responses is not None and n in responses:
            kinds[n] = "action"
        elif (n == "query" or n.startswith("query")) and (n in targets or label.lower().startswith("query")):
            kinds[n] = "query"
        elif n != start and n not in targets and (n in KNOWN_OUTCOMES or (n in graph and bare)):
            kinds[n] = "branch"
        else:
            kinds[n] = "action"
    return kinds


def infer_branch_parents(
    replies: dict[str, str], graph: dict[str, str], kinds: dict[str, str], start: str = START_NODE
) -> dict[str, list[str]]:
    """Parent node(s) of each branch node; a branch with no inferable parent maps to [].

    STAR task files give one "next" per node, so the outcome edges of the flowchart are implicit.
    Rules, in this order; the first that applies attaches one family of branches, then the rules
    start again, seeing the edges attached so far ("open" = reachable from ``start``, no "next", no
    branch attached yet). The fallbacks (generic nodes, ``done`` -> where ``yes``/``no`` went, any
    open question) are used only when no strict rule applies any more:

    1. query outcomes ``available``/``unavailable`` and ``query_success``/``query_failure`` attach to
       the open query node; when several are open, to ``query_check`` resp. ``query_book``, else the
       first in breadth-first order;
    2. answers ``correct``/``incorrect``/``noanswer``, then ``yes``/``no``, then ``done`` attach to
       the open questions (actions whose template ends with "?" or whose name contains ``ask``),
       leaving out the generic nodes (``anything_else``, ``out_of_scope``, ``*_nothing_found``,
       ``*bye``) unless nothing else is open; ``done`` with no open question attaches where
       ``yes``/``no`` did (trip_directions: "yes, and that was the last step");
    3. any other branch (``info_missing``, ``info_missing2``...) is a *detour*: its chain of "next"
       nodes rejoins the graph at some node X, and it attaches to the action P whose "next" is X
       (bank: ``info_missing`` -> dob -> maiden name -> pet -> query, so it is an outcome of
       ``bank_ask_pin``). A numbered branch (``info_missing2``) whose chain does not rejoin continues
       the previous one: it attaches to the last node of ``info_missing``'s chain.
    Checked by hand against the 24 flowcharts (``tasks/<task>/<task>.jpg``).

    Args:
        replies: The task file's ``replies`` (node -> label or template).
        graph: The task file's ``graph`` (node -> its one "next" node).
        kinds: The node kinds (:func:`node_kinds`).
        start: The start node. Default ``"hello"``.

    Returns:
        dict[str, list[str]]: Each branch node (kind ``"branch"``, not ``start``) -> its parent
        node(s); ``[]`` when no rule attaches it.
    """
    branches = [n for n, k in kinds.items() if k == "branch" and n != start]
    children: dict[str, list[str]] = defaultdict(list)
    parents: dict[str, list[str]] = {}

    def successors(n: str) -> list[str]:
        out = list(children.get(n, []))
        if n in graph:
            out.append(graph[n])
        return out

    def reach_order() -> list[str]:
        seen, order, frontier = {start}, [start], [start]
        while frontier:
            nxt = []
            for n in frontier:
                for s in successors(n):
                    if s not in seen:
                        seen.add(s)
                        order.append(s)
                        nxt.append(s)
            frontier = nxt
        return order

    def is_open(n: str) -> bool:
        return n not in graph and not children.get(n)

    def attach(b: str, ps: list[str]) -> None:
        parents[b] = list(ps)
        for p in ps:
            children[p].append(b)

    def is_question(n: str) -> bool:
        label = (replies.get(n) or "").strip()
        return kinds.get(n) == "action" and (label.endswith("?") or "ask" in n.split("_"))

    chains: dict[str, list[str]] = {}
    yes_no_parents: list[str] = []

    def series_key(b: str) -> tuple[str, int]:
        m = re.fullmatch(r"(.*?)(\d*)", b)
        return m.group(1), int(m.group(2) or 1)

    def rule_queries(relaxed: bool) -> bool:
        for fam, preferred in QUERY_OUTCOME_FAMILIES:
            present = [b for b in fam if b in branches and b not in parents]
            open_q = [n for n in reach_order() if kinds.get(n) == "query" and is_open(n)]
            if present and open_q:
                target = preferred if preferred in open_q else open_q[0]
                for b in present:
                    attach(b, [target])
                return True
        return False

    def rule_answers(relaxed: bool) -> bool:
        nonlocal yes_no_parents
        for fam in ANSWER_FAMILIES:
            present = [b for b in fam if b in branches and b not in parents]
            if not present:
                continue
            qs = [n for n in reach_order() if is_open(n) and is_question(n)]
            cands = [n for n in qs if not _is_global(n)]
            if not cands and relaxed:
                cands = yes_no_parents if fam == ("done",) and yes_no_parents else qs
            if cands:
                for b in present:
                    attach(b, cands)
                if fam == ("yes", "no"):
                    yes_no_parents = list(cands)
                return True
        return False

    def rule_detours(relaxed: bool) -> bool:
        rest = sorted((b for b in branches if b not in parents and b not in KNOWN_OUTCOMES), key=series_key)
        for b in rest:
            order = reach_order()
            reach = set(order)
            chain: list[str] = []
            c = graph.get(b)
            while c is not None and c not in reach and c not in chain:
                chain.append(c)
                c = graph.get(c)
            ps: list[str] = []
            if c is not None and c in reach and chain:
                ps = [p for p in order if graph.get(p) == c and kinds.get(p) == "action" and p not in chain][
                    :1
                ]
            if not ps:
                stem, num = series_key(b)
                prev = [p for p in chains if series_key(p)[0] == stem and series_key(p)[1] < num]
                if prev and chains[prev[-1]]:
                    ps = [chains[prev[-1]][-1]]
            if not ps and relaxed:
                qs = [n for n in order if is_open(n) and is_question(n)]
                ps = ([n for n in qs if not _is_global(n)] or qs)[:1]
            if ps:
                chains[b] = chain
                attach(b, ps)
                return True
        return False

    # Apply the first rule that makes progress, then start again; generic fallbacks ("relaxed")
    # only when no strict rule applies any more.
    rules = (rule_queries, rule_answers, rule_detours)
    while True:
        if any(rule(False) for rule in rules):
            continue
        if any(rule(True) for rule in rules):
            continue
        break
    for b in branches:
        if b not in parents:
            log.debug("branch %r: no parent could be inferred", b)
    return {b: parents.get(b, []) for b in branches}


_PLAIN = {
    "hello": "Greet the user and ask how you can help",
    "anything_else": "Ask whether there is anything else you can do",
    "out_of_scope": "Say that you cannot help with that request",
}


def describe_node(node: str, kind: str, domain: str = "", function: str = "") -> str:
    """A plain-language description of a workflow node, from its name.

    Args:
        node: The node's name (e.g. ``ride_ask_destination``).
        kind: Its kind (:func:`node_kinds`); ``"query"`` gives a knowledge-base query description.
        domain: The task's domain; a ``<domain>_`` prefix of the name is dropped.
        function: The API's function, named in a query's description; ``""`` names none.

    Returns:
        str: A short imperative sentence without final punctuation (e.g. "Ask the user for the
        destination", "Query the knowledge base to check availability").
    """
    if node in _PLAIN:
        return _PLAIN[node]
    if kind == "query":
        api = f" ({function})" if function else ""
        if node.endswith("_check"):
            return f"Query the knowledge base{api} to check availability"
        if node.endswith("_book"):
            return f"Query the knowledge base{api} to make the booking"
        return f"Query the knowledge base{api}"
    name = node[len(domain) + 1 :] if domain and node.startswith(domain + "_") else node
    words = name.split("_")
    if words and words[-1].isdigit():
        words = words[:-1]
    if "bye" in words or "goodbye" in words:
        return "Say goodbye"
    if "nothing" in words and "found" in words:
        return "Tell the user that nothing matches their request"
    rest = " ".join(words[1:])
    if words[:2] == ["ask", "confirm"]:
        return f"Ask the user to confirm the {' '.join(words[2:])}"
    if words[:1] == ["ask"]:
        return "Ask for the user's name" if rest == "name" else f"Ask the user for the {rest}"
    if words[:1] in (["inform"], ["provide"]):
        return f"Inform the user: {rest}"
    return " ".join(words).capitalize()
