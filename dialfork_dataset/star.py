"""Reader of the STAR corpus (Mosig, Mehri and Kober, 2020): task workflows, APIs, scenarios, dialogues.

Two on-disk layouts are accepted by :class:`StarCorpus`:

* the **compact layout** of the project's shared copy: ``tasks/``, ``apis/``, ``scenarios.jsonl``
  (one line per STAR dialogue, role-play instructions and lengths) and ``dialogues.jsonl.gz``
  (the human dialogues, one JSON object per line);
* the **original layout** of the public repository RasaHQ/STAR: ``tasks/``, ``apis/`` and
  ``dialogues/<DialogueID>.json`` (one file per dialogue, keys ``DialogueID``, ``CompletionLevel``,
  ``Scenario`` {``Domains``, ``WizardCapabilities``, ``Happy``, ``MultiTask``, ``UserTask``,
  ``WizardTask``}, ``Events`` [{``Agent``, ``Action``, ``Text``, ``ActionLabel``, ...}]). Scenarios
  are derived from those files with the rules of the compact layout (see :func:`scenario_from_dialogue`).

Workflows. A STAR task file gives ``replies`` (node -> text) and ``graph`` (node -> *one* next node).
The branching of the flowchart is implicit: *branch nodes* (``available``/``unavailable``,
``query_success``/``query_failure``, ``yes``/``no``, ``correct``/``incorrect``/``noanswer``, ``done``,
``info_missing``...) appear as keys of ``graph`` but are never the "next" of another node. Which
node each branch is an outcome of is inferred by :func:`infer_branch_parents` (rules documented
there, checked against the 24 flowcharts). :meth:`StarTask.digraph` returns the completed graph and
:meth:`StarTask.steps` / :meth:`StarTask.render_steps` a numbered, plain-language version of it.

Downloading: :func:`download_star` fetches the public repository archive; :func:`resolve_star`
finds a local copy (argument, else ``$DIALFORK_STAR_DIR``).
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import zipfile
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import networkx

from .console import progress_disabled
from .errors import CollectedErrors

log = logging.getLogger(__name__)

STAR_COMMIT = "3058975092cdd09798e4a3a9e4ae135755824545"
DEFAULT_STAR_URL = f"https://github.com/RasaHQ/STAR/archive/{STAR_COMMIT}.zip"
STAR_ENV = "DIALFORK_STAR_DIR"
START_NODE = "hello"

#: Query outcome families, with the query node each family prefers when several queries are open.
QUERY_OUTCOME_FAMILIES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("available", "unavailable"), "query_check"),
    (("query_success", "query_failure"), "query_book"),
)
#: Answers of the user to a question of the system, attached in this order.
ANSWER_FAMILIES: tuple[tuple[str, ...], ...] = (
    ("correct", "incorrect", "noanswer"),
    ("yes", "no"),
    ("done",),
)
_KNOWN_OUTCOMES = frozenset(
    n for fam, _ in QUERY_OUTCOME_FAMILIES for n in fam
) | frozenset(n for fam in ANSWER_FAMILIES for n in fam)
_GLOBAL_RE = re.compile(r"(^|_)(anything_else|out_of_scope|nothing_found|bye|goodbye)(_|$)|goodbye|_bye$")
_MAX_LISTED_ERRORS = 50


class StarError(CollectedErrors):
    """A STAR file is missing or wrong. ``errors`` lists every problem found (``file: problem``)."""


def _raise_collected(errors: list[str], what: str) -> None:
    if not errors:
        return
    shown = errors[:_MAX_LISTED_ERRORS]
    more = f"\n... and {len(errors) - len(shown)} more" if len(errors) > len(shown) else ""
    raise StarError(f"{len(errors)} problem(s) in {what}:\n" + "\n".join(shown) + more, errors)


def _read_json(path: Path, errors: list[str], what: str = "file") -> Any:
    """Parse ``path``; on failure append ``"path: problem"`` to ``errors`` and return None."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        errors.append(f"{path}: missing {what}")
        return None
    except (OSError, UnicodeDecodeError) as e:
        errors.append(f"{path}: unreadable {what} ({e})")
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        errors.append(f"{path}:{e.lineno}:{e.colno}: malformed JSON ({e.msg})")
        return None


def task_domain(task: str) -> str:
    """Domain of a STAR task: its name up to the first underscore (``ride_book`` -> ``ride``)."""
    return task.split("_", 1)[0]


# --------------------------------------------------------------------------------------------- scenarios


@dataclass(frozen=True)
class Scenario:
    """The role-play instructions of one STAR dialogue and the length of its human dialogue."""

    scenario_id: str
    tasks: tuple[str, ...]
    domains: tuple[str, ...]
    happy: bool
    multitask: bool
    completion_level: str
    user_task: str
    wizard_task: str
    user_guide: tuple[str, ...]
    n_user_utterances: int
    n_system_utterances: int

    @property
    def length(self) -> int:
        """Turns of the human dialogue, both speakers."""
        return self.n_user_utterances + self.n_system_utterances

    @property
    def single_task(self) -> bool:
        return len(self.tasks) == 1 and not self.multitask

    @property
    def task(self) -> str:
        """The scenario's task; raises :class:`StarError` for a multi-task scenario."""
        if len(self.tasks) != 1:
            raise StarError(f"scenario {self.scenario_id} has {len(self.tasks)} tasks {list(self.tasks)}; "
                            "use .tasks for multi-task scenarios")
        return self.tasks[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario_id": self.scenario_id, "tasks": list(self.tasks), "domains": list(self.domains),
            "happy": self.happy, "multitask": self.multitask, "completion_level": self.completion_level,
            "user_task": self.user_task, "wizard_task": self.wizard_task, "user_guide": list(self.user_guide),
            "n_user_utterances": self.n_user_utterances, "n_system_utterances": self.n_system_utterances,
        }


def _fill_domains(domains: Iterable[Any], tasks: tuple[str, ...]) -> tuple[str, ...]:
    """STAR stores ``null`` as the domain of some trivia dialogues: fill it from the task name."""
    out = []
    for d in domains:
        if d is None:
            if len(tasks) != 1:
                continue
            d = task_domain(tasks[0])
        if d not in out:
            out.append(d)
    return tuple(out)


_SCENARIO_TYPES: dict[str, type | tuple[type, ...]] = {
    "tasks": list, "domains": list, "happy": bool, "multitask": bool, "completion_level": str,
    "user_task": str, "wizard_task": str, "user_guide": list, "n_user_utterances": int,
    "n_system_utterances": int,
}


def scenario_from_row(row: Any, where: str, errors: list[str]) -> Scenario | None:
    """A :class:`Scenario` from one line of ``scenarios.jsonl``; problems go to ``errors``."""
    if not isinstance(row, dict):
        errors.append(f"{where}: expected a JSON object, got {type(row).__name__}")
        return None
    bad = []
    if not isinstance(row.get("dialogue_id"), (int, str)) or isinstance(row.get("dialogue_id"), bool):
        bad.append("'dialogue_id' missing or not an int/str")
    for key, typ in _SCENARIO_TYPES.items():
        if key not in row:
            bad.append(f"missing key {key!r}")
        elif not isinstance(row[key], typ) or (typ is int and isinstance(row[key], bool)):
            bad.append(f"{key!r} should be {typ.__name__}, got {type(row[key]).__name__}")
    if not bad and not all(isinstance(t, str) for t in row["tasks"]):
        bad.append("'tasks' should be a list of strings")
    if bad:
        errors.append(f"{where}: " + "; ".join(bad))
        return None
    tasks = tuple(row["tasks"])
    return Scenario(
        scenario_id=str(row["dialogue_id"]), tasks=tasks, domains=_fill_domains(row["domains"], tasks),
        happy=row["happy"], multitask=row["multitask"], completion_level=row["completion_level"],
        user_task=row["user_task"], wizard_task=row["wizard_task"],
        user_guide=tuple(str(g) for g in row["user_guide"]),
        n_user_utterances=row["n_user_utterances"], n_system_utterances=row["n_system_utterances"],
    )


def _camel_to_snake(key: str) -> str:
    if key == "APIName":
        return "api"
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).lower()


def normalize_event(event: dict[str, Any]) -> dict[str, Any]:
    """An original-layout event (``Agent``, ``Action``, ``Text``, ``ActionLabel``, ``APIName``...) with
    the compact layout's keys (``agent``, ``action``, ``text``, ``action_label``, ``api``...).
    ``text`` is always present (None when the event has none). Already-normalised events pass through."""
    out = {_camel_to_snake(k): v for k, v in event.items()}
    out.setdefault("text", None)
    return out


def count_utterances(events: Iterable[dict[str, Any]]) -> tuple[int, int]:
    """(user, system) utterances of a STAR dialogue: ``User/utter`` events, and ``Wizard`` events that
    sent a message (``utter``, or ``pick_suggestion`` of a response template). These are the counts of
    ``n_user_utterances`` / ``n_system_utterances`` in the compact layout (identical on all 6,652)."""
    n_user = n_sys = 0
    for e in events:
        if e.get("agent") == "User" and e.get("action") == "utter":
            n_user += 1
        elif e.get("agent") == "Wizard" and e.get("action") in ("utter", "pick_suggestion"):
            n_sys += 1
    return n_user, n_sys


def scenario_from_dialogue(dialogue: Any, where: str, errors: list[str]) -> Scenario | None:
    """A :class:`Scenario` from one original-layout dialogue file (``dialogues/<id>.json``).

    Mapping: ``scenario_id`` = ``DialogueID``; ``tasks`` = ``Scenario.Tasks`` when present, else the
    ``Task`` of each ``Scenario.WizardCapabilities`` entry (order kept, duplicates dropped);
    ``domains`` = ``Scenario.Domains``; ``happy``/``multitask`` = ``Scenario.Happy``/``MultiTask``;
    ``completion_level`` = ``CompletionLevel``; ``user_task``/``wizard_task`` = ``Scenario.UserTask``/
    ``WizardTask``; ``user_guide`` = the texts of the ``UserGuide``/``instruct`` events in order;
    lengths by :func:`count_utterances`.
    """
    if not isinstance(dialogue, dict):
        errors.append(f"{where}: expected a JSON object, got {type(dialogue).__name__}")
        return None
    sc = dialogue.get("Scenario")
    events = dialogue.get("Events")
    bad = []
    if "DialogueID" not in dialogue:
        bad.append("missing key 'DialogueID'")
    if not isinstance(sc, dict):
        bad.append("missing or non-object 'Scenario'")
    if not isinstance(events, list):
        bad.append("missing or non-list 'Events'")
    if bad:
        errors.append(f"{where}: " + "; ".join(bad))
        return None
    if isinstance(sc.get("Tasks"), list):
        tasks_raw = sc["Tasks"]
    else:
        tasks_raw = [c.get("Task") for c in sc.get("WizardCapabilities") or [] if isinstance(c, dict)]
    tasks: list[str] = []
    for t in tasks_raw:
        if isinstance(t, str) and t not in tasks:
            tasks.append(t)
    for key, typ in (("Domains", list), ("Happy", bool), ("MultiTask", bool), ("UserTask", str),
                     ("WizardTask", str)):
        if not isinstance(sc.get(key), typ):
            bad.append(f"Scenario.{key} missing or not a {typ.__name__}")
    if not tasks:
        bad.append("no task: Scenario.Tasks and Scenario.WizardCapabilities[].Task are both empty")
    if not isinstance(dialogue.get("CompletionLevel"), str):
        bad.append("'CompletionLevel' missing or not a string")
    if bad:
        errors.append(f"{where}: " + "; ".join(bad))
        return None
    norm = [normalize_event(e) for e in events if isinstance(e, dict)]
    n_user, n_sys = count_utterances(norm)
    guide = tuple(e["text"] for e in norm
                  if e.get("agent") == "UserGuide" and e.get("action") == "instruct" and e["text"] is not None)
    tasks_t = tuple(tasks)
    return Scenario(
        scenario_id=str(dialogue["DialogueID"]), tasks=tasks_t, domains=_fill_domains(sc["Domains"], tasks_t),
        happy=sc["Happy"], multitask=sc["MultiTask"], completion_level=dialogue["CompletionLevel"],
        user_task=sc["UserTask"], wizard_task=sc["WizardTask"], user_guide=guide,
        n_user_utterances=n_user, n_system_utterances=n_sys,
    )


# --------------------------------------------------------------------------------------------- APIs


@dataclass
class StarApi:
    """A knowledge-base API of ``apis/apis/<name>.json``."""

    name: str
    function: str
    db: str
    inputs: list[dict[str, Any]]
    outputs: list[dict[str, Any]]
    required: list[str]
    returns_count: bool = False

    def slot(self, slot: str) -> dict[str, Any]:
        for s in self.inputs:
            if s.get("Name") == slot:
                return s
        raise StarError(f"API {self.name}: no input slot {slot!r}; slots: {[s.get('Name') for s in self.inputs]}")

    def categories(self, slot: str) -> list[str]:
        """The categorical values of input ``slot`` ([] for free-text slots)."""
        return list(self.slot(slot).get("Categories") or [])

    @classmethod
    def load(cls, path: Path, errors: list[str]) -> StarApi | None:
        data = _read_json(path, errors, "API file")
        if data is None:
            return None
        if not isinstance(data, dict):
            errors.append(f"{path}: expected a JSON object, got {type(data).__name__}")
            return None
        bad = []
        for key, typ in (("input", list), ("output", list), ("required", list), ("db", str), ("function", str)):
            if not isinstance(data.get(key), typ):
                bad.append(f"{key!r} missing or not a {typ.__name__}")
        if not bad:
            for i, s in enumerate(data["input"]):
                if not isinstance(s, dict) or not isinstance(s.get("Name"), str):
                    bad.append(f"input[{i}] has no 'Name'")
            names = {s.get("Name") for s in data["input"] if isinstance(s, dict)}
            missing = [r for r in data["required"] if r not in names]
            if missing:
                bad.append(f"required slot(s) {missing} are not input slots")
        if bad:
            errors.append(f"{path}: " + "; ".join(bad))
            return None
        return cls(name=path.stem, function=data["function"], db=data["db"], inputs=data["input"],
                   outputs=data["output"], required=list(data["required"]),
                   returns_count=bool(data.get("returns_count", False)))


# --------------------------------------------------------------------------------------------- workflows


@dataclass
class WorkflowBranch:
    """One outcome of a step: ``label`` is the branch node (``available``, ``yes``...), ``text`` its
    label in the task file (``Available``...), ``steps`` what follows (nested)."""

    label: str
    steps: list[WorkflowStep] = field(default_factory=list)
    text: str = ""


@dataclass
class WorkflowStep:
    """A numbered step of a workflow.

    ``kind`` is ``"query"`` for a knowledge-base query node, ``"branch"`` for an action whose outcome
    decides the next step (it has ``branches``), ``"action"`` otherwise. A step with ``goto`` set is a
    reference to an earlier step (a loop or a merge), not a new step: ``number == goto``.
    """

    number: int
    node: str
    kind: str
    text: str
    template: str | None = None
    branches: list[WorkflowBranch] = field(default_factory=list)
    goto: int | None = None


def _is_global(node: str) -> bool:
    return bool(_GLOBAL_RE.search(node))


def node_kinds(replies: dict[str, str], graph: dict[str, str], responses: dict[str, str] | None,
               start: str = START_NODE) -> dict[str, str]:
    """``action`` / ``query`` / ``branch`` for every node of ``replies``, ``responses`` and ``graph``.

    Nodes of ``responses.json`` (what the system role could say) are actions. Query nodes are the
    other nodes named ``query``/``query_*`` that are the "next" of some node or whose label starts
    with "Query" (``query``, ``query_check``, ``query_book``). Branch nodes are never the "next" of
    a node, are not the start, and are either a known outcome label (``yes``, ``available``,
    ``query_success``...) or a key of ``graph`` whose label is bare (no ``{slot}``, no final
    punctuation: ``info_missing``). Everything else is an action (e.g. ``*_nothing_found``, which
    has a reply but no edge).
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
        elif n != start and n not in targets and (n in _KNOWN_OUTCOMES or (n in graph and bare)):
            kinds[n] = "branch"
        else:
            kinds[n] = "action"
    return kinds


def infer_branch_parents(replies: dict[str, str], graph: dict[str, str], kinds: dict[str, str],
                         start: str = START_NODE) -> dict[str, list[str]]:
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
        rest = sorted((b for b in branches if b not in parents and b not in _KNOWN_OUTCOMES), key=series_key)
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
                ps = [p for p in order if graph.get(p) == c and kinds.get(p) == "action" and p not in chain][:1]
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
    """A plain-language description of a workflow node, from its name."""
    if node in _PLAIN:
        return _PLAIN[node]
    if kind == "query":
        api = f" ({function})" if function else ""
        if node.endswith("_check"):
            return f"Query the knowledge base{api} to check availability"
        if node.endswith("_book"):
            return f"Query the knowledge base{api} to make the booking"
        return f"Query the knowledge base{api}"
    name = node[len(domain) + 1:] if domain and node.startswith(domain + "_") else node
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


@dataclass
class StarTask:
    """One STAR task folder: ``tasks/<name>/``."""

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
    def load(cls, task_dir: str | os.PathLike, api: StarApi | None = None,
             errors: list[str] | None = None) -> StarTask | None:
        """Read ``task_dir``. With ``errors`` given, problems are appended there and None is returned;
        otherwise a :class:`StarError` listing every problem of the folder is raised."""
        own = errors is None
        errs: list[str] = [] if own else errors
        n0 = len(errs)
        task_dir = Path(task_dir)
        name = task_dir.name
        main = task_dir / f"{name}.json"
        data = _read_json(main, errs, f"task file (expected tasks/{name}/{name}.json)")
        task = None
        if data is not None:
            task = cls._from_parts(name, task_dir, main, data, api, errs)
        if own:
            _raise_collected(errs[n0:], f"STAR task {task_dir}")
        return task if len(errs) == n0 else None

    @classmethod
    def _from_parts(cls, name: str, task_dir: Path, main: Path, data: Any, api: StarApi | None,
                    errs: list[str]) -> StarTask | None:
        n0 = len(errs)
        if not isinstance(data, dict):
            errs.append(f"{main}: expected a JSON object with 'task', 'replies', 'graph', got {type(data).__name__}")
            return None
        for key in ("replies", "graph"):
            val = data.get(key)
            if not isinstance(val, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in val.items()):
                errs.append(f"{main}: {key!r} missing or not an object of strings (node -> text/node)")
        resp_path = task_dir / "responses.json"
        responses = None
        if resp_path.exists():
            responses = _read_json(resp_path, errs, "responses file")
            if responses is not None and not (isinstance(responses, dict)
                                              and all(isinstance(v, str) for v in responses.values())):
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
                if node in known or node.startswith("query") or node in _KNOWN_OUTCOMES:
                    continue
                errs.append(f"{main}: graph edge {src!r} -> {dst!r}: unknown {role} node {node!r} "
                            "(no reply in 'replies' or responses.json, and not a query/branch node)")
        nlu = _parse_nlu(task_dir / "wizard_nlu_training_data.md", errs)
        instr_path = task_dir / "instructions.txt"
        instructions = instr_path.read_text(encoding="utf-8").strip() if instr_path.exists() else None
        jpg = task_dir / f"{name}.jpg"
        if len(errs) > n0:
            return None
        return cls(name=name, domain=task_domain(name), function=data["task"], replies=dict(replies),
                   graph=dict(graph), responses=dict(responses or {}), nlu=nlu, instructions=instructions,
                   flowchart=jpg if jpg.exists() else None, api=api)

    # ---- what backends need (dialfork_dataset.sources.WorkflowTask)

    def missing(self, feature: str, dbs: dict[str, Any] | None = None) -> list[str]:
        """The fields of ``feature`` (``surface_templates``, ``api``, ``kb``; see
        :mod:`dialfork_dataset.sources`) this task lacks, as "where (field)" strings; [] if none."""
        if feature == "surface_templates":
            steps = [n for n in _walk_order(self.steps()) if self.kinds.get(n) == "action"]
            return [f"response template of step {n!r} (responses.json or 'replies' of {self.name}.json)"
                    for n in steps if not self.template(n)]
        if feature == "api":
            return [] if self.api is not None else [f"API (apis/apis/{self.name}.json)"]
        if feature == "kb":
            if self.api is None:
                return [f"API (apis/apis/{self.name}.json), which names the knowledge base"]
            return [] if dbs is not None and (self.api.db in dbs or self.domain in dbs) else \
                [f"knowledge base {self.api.db!r} (apis/dbs/{self.api.db}.json)"]
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
        """The plain-language text of a step (:func:`describe_node`, from the node's name and kind)."""
        kind = self.kinds.get(node, "action")
        return describe_node(node, kind, self.domain, self.function if kind == "query" else "")

    def template(self, node: str) -> str | None:
        """The response template of an action node (responses.json, else replies), None for others."""
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
        order = _walk_order(self.steps())
        return [n for n in order if g.out_degree(n) == 0]

    def other_nodes(self) -> list[str]:
        """Actions not reachable from ``hello`` (``out_of_scope``, ``*_nothing_found``, ``*_bye``...):
        responses the system may use at any point."""
        g = self.digraph()
        return [n for n, d in g.nodes(data=True) if d["kind"] == "action" and not d["reachable"]]

    def steps(self) -> list[WorkflowStep]:
        """Numbered steps from ``hello``; outcomes nested as :class:`WorkflowBranch`.

        Numbers follow a depth-first walk (a branch's steps come before the steps after the
        branching step). A branch's chain stops where it rejoins the main line of an enclosing step
        ("continue with step N"), and a node met again on the current path is a loop ("go back to
        step N"); both are ``goto`` steps. Cycles therefore terminate.
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
                step = WorkflowStep(number=counter[0], node=node, kind=kind,
                                    text=self.describe(node),
                                    template=self.template(node))
                out.append(step)
                path = (*path, node)
                nxt = self.graph.get(node)
                inner = pending | main_line(nxt)
                for b in kids:
                    step.branches.append(WorkflowBranch(label=b, text=self.replies.get(b, b),
                                                        steps=walk(self.graph.get(b), path, inner)))
                node = nxt
            return out

        steps = walk(self.start_node, (), frozenset())
        for step, loop in gotos:
            n = numbered[step.node]
            step.number = step.goto = n
            step.text = f"{'Go back to' if loop else 'Continue with'} step {n}"
        return steps

    def render_steps(self, with_templates: bool = True, include_other: bool = True,
                     include_instructions: bool = True) -> str:
        """The workflow as numbered plain-language text (for LLM prompts and annotators).

        Each step shows its node id in brackets and, with ``with_templates``, its response template;
        outcomes are indented under their step. ``include_other`` appends the responses usable at any
        point (:meth:`other_nodes`); ``include_instructions`` appends ``instructions.txt`` if any.
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


def _walk_order(steps: list[WorkflowStep]) -> list[str]:
    out: list[str] = []
    for s in steps:
        if s.goto is None:
            out.append(s.node)
        for b in s.branches:
            out.extend(_walk_order(b.steps))
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
            current = out.setdefault(head.split(":", 1)[1].strip(), []) if head.startswith("intent:") else None
        elif current is not None and s.startswith("- "):
            current.append(s[2:].strip())
    return out


# --------------------------------------------------------------------------------------------- corpus


def is_star_dir(path: str | os.PathLike) -> bool:
    """True when ``path`` looks like a STAR copy (either layout): ``tasks/`` and ``apis/`` folders."""
    p = Path(path)
    return (p / "tasks").is_dir() and (p / "apis").is_dir()


def _dialogue_files(folder: Path) -> list[Path]:
    files = [f for f in folder.glob("*.json") if f.is_file()]
    return sorted(files, key=lambda f: (0, int(f.stem)) if f.stem.isdigit() else (1, f.stem))


class StarCorpus:
    """A local STAR copy (compact or original layout, see the module doc).

    ``path`` None means ``$DIALFORK_STAR_DIR`` (:func:`resolve_star`). Tasks and APIs are read (and
    validated, all problems collected) at construction; scenarios, the knowledge bases and the
    human dialogues are read on first use.
    """

    def __init__(self, path: str | os.PathLike | None = None):
        if path is None:  # $DIALFORK_STAR_DIR, with a helpful error when unset
            path = resolve_star(None)
        self.path = Path(path).expanduser().resolve()
        if not self.path.is_dir():
            raise StarError(f"{self.path}: no such folder; download STAR with "
                            "dialfork_dataset.star.download_star(dest) or set $" + STAR_ENV)
        if not (self.path / "tasks").is_dir():
            raise StarError(f"{self.path}: not a STAR copy (no tasks/ folder); point to the root of a STAR "
                            "copy or download one with dialfork_dataset.star.download_star(dest)")
        if (self.path / "scenarios.jsonl").is_file():
            self.layout = "compact"
        elif (self.path / "dialogues").is_dir():
            self.layout = "original"
        else:
            self.layout = "tasks-only"
        errors: list[str] = []
        self.apis: dict[str, StarApi] = {}
        api_dir = self.path / "apis" / "apis"
        if api_dir.is_dir():
            for f in sorted(api_dir.glob("*.json")):
                api = StarApi.load(f, errors)
                if api is not None:
                    self.apis[api.name] = api
        else:
            log.warning("%s: no apis/apis folder; tasks will have no API", self.path)
        tasks: dict[str, StarTask] = {}
        for d in sorted(p for p in (self.path / "tasks").iterdir() if p.is_dir()):
            t = StarTask.load(d, api=self.apis.get(d.name), errors=errors)
            if t is not None:
                tasks[t.name] = t
        if not tasks and not errors:
            errors.append(f"{self.path / 'tasks'}: no task folders")
        _raise_collected(errors, f"STAR copy {self.path}")
        self.tasks: dict[str, StarTask] = tasks
        domains: dict[str, list[str]] = defaultdict(list)
        for name, t in tasks.items():
            domains[t.domain].append(name)
        self.domains: dict[str, list[str]] = dict(sorted(domains.items()))

    def __repr__(self) -> str:
        return f"StarCorpus({str(self.path)!r}, layout={self.layout!r}, tasks={len(self.tasks)})"

    def task(self, name: str) -> StarTask:
        try:
            return self.tasks[name]
        except KeyError:
            raise StarError(f"unknown STAR task {name!r} in {self.path}; known tasks: "
                            + ", ".join(self.tasks)) from None

    # ---- scenarios

    @cached_property
    def scenarios(self) -> list[Scenario]:
        """All scenarios, in dialogue-id order (numeric ids numerically)."""
        errors: list[str] = []
        out: list[Scenario] = []
        if self.layout == "compact":
            from .jsonl import JsonlError, iter_jsonl

            path = self.path / "scenarios.jsonl"
            try:
                for lineno, row in iter_jsonl(path, collect=True):
                    s = scenario_from_row(row, f"{path}:{lineno}", errors)
                    if s is not None:
                        out.append(s)
            except JsonlError as e:
                errors = e.errors + errors
        elif self.layout == "original":
            from tqdm.auto import tqdm

            files = _dialogue_files(self.path / "dialogues")
            quiet = len(files) <= 500 or progress_disabled()
            for f in tqdm(files, desc="STAR scenarios", unit="dialogue", disable=True if quiet else None):
                data = _read_json(f, errors, "dialogue file")
                if data is not None:
                    s = scenario_from_dialogue(data, str(f), errors)
                    if s is not None:
                        out.append(s)
        else:
            raise StarError(f"{self.path}: no scenarios.jsonl and no dialogues/ folder; this STAR copy has "
                            "tasks only (download the full repository with download_star)")
        seen: Counter[str] = Counter(s.scenario_id for s in out)
        errors += [f"{self.path}: scenario id {i} appears {c} times" for i, c in seen.items() if c > 1]
        unknown = sorted({t for s in out for t in s.tasks} - set(self.tasks))
        if unknown:
            log.warning("%s: scenarios name tasks with no folder under tasks/: %s", self.path, unknown)
        _raise_collected(errors, f"STAR scenarios of {self.path}")
        out.sort(key=lambda s: (0, int(s.scenario_id), "") if s.scenario_id.isdigit() else (1, 0, s.scenario_id))
        return out

    @cached_property
    def _scenario_index(self) -> dict[str, Scenario]:
        return {s.scenario_id: s for s in self.scenarios}

    def scenario(self, scenario_id: str | int) -> Scenario:
        try:
            return self._scenario_index[str(scenario_id)]
        except KeyError:
            raise StarError(f"no STAR scenario with id {scenario_id!r} in {self.path}") from None

    def scenarios_for(self, task: str | None = None, single_task: bool = True,
                      happy: bool | None = None) -> list[Scenario]:
        """Scenarios involving ``task`` (any task when None); ``single_task`` keeps only single-task
        scenarios (one task, ``multitask`` false); ``happy`` filters on the happy flag when not None."""
        if task is not None:
            self.task(task)
        return [s for s in self.scenarios
                if (task is None or task in s.tasks)
                and (not single_task or s.single_task)
                and (happy is None or s.happy == happy)]

    def length_budget(self, task: str, single_task_only: bool = True) -> int:
        """SPEC 3 length budget of ``task``: the maximum ``n_user + n_system`` over the task's STAR human
        dialogues. ``single_task_only`` (default, ours): only single-task dialogues count, the
        scenarios DialFork generates from; False also counts the multi-task dialogues involving it."""
        lengths = [s.length for s in self.scenarios_for(task, single_task=single_task_only)]
        if not lengths:
            raise StarError(f"task {task!r} has no {'single-task ' if single_task_only else ''}"
                            f"STAR dialogue in {self.path}: no length budget")
        return max(lengths)

    # ---- knowledge bases and dialogues

    @cached_property
    def dbs(self) -> dict[str, Any]:
        """Raw knowledge-base files ``apis/dbs/<name>.json`` (name -> parsed JSON)."""
        errors: list[str] = []
        out: dict[str, Any] = {}
        for f in sorted((self.path / "apis" / "dbs").glob("*.json")):
            data = _read_json(f, errors, "knowledge-base file")
            if data is not None:
                out[f.stem] = data
        _raise_collected(errors, f"STAR knowledge bases of {self.path}")
        return out

    def human_dialogues(self) -> Iterator[dict[str, Any]]:
        """The human dialogues as ``{scenario_id, tasks, events}``, events with the compact layout's
        keys (``agent``, ``action``, ``text``, ``action_label``, ``constraints``, ``api``, ``item``...)."""
        if self.layout == "compact":
            path = self.path / "dialogues.jsonl.gz"
            if not path.is_file():
                raise StarError(f"{path}: missing (the compact layout keeps the human dialogues there)")
            with gzip.open(path, "rt", encoding="utf-8") as fh:
                for lineno, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    try:
                        d = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise StarError(f"{path}:{lineno}:{e.colno}: malformed JSON ({e.msg})") from None
                    if not isinstance(d, dict) or "dialogue_id" not in d or not isinstance(d.get("events"), list):
                        raise StarError(f"{path}:{lineno}: expected an object with 'dialogue_id' and 'events'")
                    yield {"scenario_id": str(d["dialogue_id"]), "tasks": list(d.get("tasks") or []),
                           "events": [normalize_event(e) for e in d["events"]]}
        elif self.layout == "original":
            for f in _dialogue_files(self.path / "dialogues"):
                errors: list[str] = []
                data = _read_json(f, errors, "dialogue file")
                s = scenario_from_dialogue(data, str(f), errors) if data is not None else None
                if s is None:
                    _raise_collected(errors, str(f))
                yield {"scenario_id": s.scenario_id, "tasks": list(s.tasks),
                       "events": [normalize_event(e) for e in data["Events"] if isinstance(e, dict)]}
        else:
            raise StarError(f"{self.path}: no human dialogues (neither dialogues.jsonl.gz nor dialogues/)")

    def summary(self) -> dict[str, Any]:
        """Counts: tasks, domains, scenarios, single-task scenarios, per-task domain/count/budget."""
        per_task = {}
        for name, t in self.tasks.items():
            single = self.scenarios_for(name)
            per_task[name] = {
                "domain": t.domain,
                "single_task_scenarios": len(single),
                "length_budget": max((s.length for s in single), default=None),
            }
        return {
            "path": str(self.path), "layout": self.layout, "tasks": len(self.tasks), "domains": len(self.domains),
            "scenarios": len(self.scenarios), "single_task_scenarios": sum(s.single_task for s in self.scenarios),
            "per_task": per_task,
        }


# --------------------------------------------------------------------------------------------- locating / downloading


def resolve_star(path: str | os.PathLike | None = None) -> Path:
    """The STAR folder to use: ``path`` if given, else ``$DIALFORK_STAR_DIR``. The folder must hold a
    STAR copy (``tasks/`` and ``apis/``)."""
    if path is None:
        env = os.environ.get(STAR_ENV)
        if not env:
            raise StarError(
                f"no STAR folder given and ${STAR_ENV} is not set. Either pass the path of a STAR copy, "
                f"set {STAR_ENV}=/path/to/star, or download it (network needed) with\n"
                "  python -c 'from dialfork_dataset.star import download_star; download_star(\"star\")'\n"
                f"which fetches RasaHQ/STAR at commit {STAR_COMMIT[:12]} from GitHub.")
        path, origin = env, f"${STAR_ENV}"
    else:
        origin = "the given path"
    p = Path(path).expanduser().resolve()
    if not is_star_dir(p):
        raise StarError(f"{p} ({origin}) is not a STAR copy: it needs tasks/ and apis/ folders. Download one "
                        "with dialfork_dataset.star.download_star(dest).")
    return p


def _find_star_root(folder: Path) -> Path | None:
    if is_star_dir(folder):
        return folder
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        if is_star_dir(sub):
            return sub
    return None


def download_star(dest: str | os.PathLike, url: str = DEFAULT_STAR_URL, *, force: bool = False,
                  timeout: float = 60.0, progress: bool | None = None) -> Path:
    """Download and extract the public STAR repository (a zip archive, GitHub's archive of RasaHQ/STAR
    at commit :data:`STAR_COMMIT` by default) into ``dest`` and return ``dest``.

    If ``dest`` already holds a STAR copy nothing is downloaded (``force=True`` replaces it). The
    archive goes to a temporary file beside ``dest``, is extracted to a temporary folder, checked
    (``tasks/`` and ``apis/`` present, and ``dialogues/`` or ``scenarios.jsonl``), then renamed into
    place, so an interrupted download never leaves a half-written ``dest``. ``progress`` shows a tqdm
    bar (None: only on a terminal).
    """
    import urllib.error
    import urllib.request

    from tqdm.auto import tqdm

    dest = Path(dest).expanduser().resolve()
    if is_star_dir(dest) and not force:
        log.info("%s already holds a STAR copy; nothing downloaded", dest)
        return dest
    if dest.exists() and not is_star_dir(dest) and (not dest.is_dir() or any(dest.iterdir())):
        raise StarError(f"{dest} exists and is not a STAR copy; give an empty or new folder")
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".star-download-", dir=dest.parent))
    try:
        archive = work / "star.zip"
        log.info("downloading STAR from %s", url)
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp, archive.open("wb") as out:
                total = int(resp.headers.get("Content-Length") or 0) or None
                with tqdm(total=total, unit="B", unit_scale=True, desc="STAR download",
                          disable=True if progress_disabled() else None if progress is None else not progress) as bar:
                    while chunk := resp.read(1 << 20):
                        out.write(chunk)
                        bar.update(len(chunk))
        except urllib.error.HTTPError as e:
            raise StarError(f"downloading STAR from {url} failed: HTTP {e.code} {e.reason}. Check the URL "
                            "(default: the GitHub archive of RasaHQ/STAR) or download it by hand and pass "
                            "its folder.") from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise StarError(f"downloading STAR from {url} failed: {reason}. Check the network, or download "
                            "the archive by hand, extract it and pass its folder.") from None
        extract = work / "extract"
        try:
            with zipfile.ZipFile(archive) as zf:
                for member in zf.namelist():
                    if member.startswith("/") or ".." in Path(member).parts:
                        raise StarError(f"{url}: unsafe path {member!r} in the archive; not extracting")
                zf.extractall(extract)
        except zipfile.BadZipFile:
            raise StarError(f"{url}: the download is not a zip archive") from None
        root = _find_star_root(extract)
        if root is None:
            raise StarError(f"{url}: the archive holds no STAR copy (no folder with tasks/ and apis/)")
        if not ((root / "dialogues").is_dir() or (root / "scenarios.jsonl").is_file()):
            raise StarError(f"{url}: the archive's STAR copy has neither dialogues/ nor scenarios.jsonl")
        old = None
        if dest.exists():
            old = work / "old"
            dest.rename(old)
        root.rename(dest)
        log.info("STAR extracted to %s", dest)
        return dest
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --------------------------------------------------------------------------------------------- CLI


def build_parser():
    """The parser of ``python -m dialfork_dataset.star``."""
    import argparse

    from .console import add_verbosity_options, state_defaults

    ap = argparse.ArgumentParser(prog="python -m dialfork_dataset.star", description=__doc__.split("\n\n")[0])
    add_verbosity_options(ap, default="INFO")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("summary", help="print the counts of a STAR copy as JSON")
    p.add_argument("path", nargs="?", help=f"STAR folder (default: ${STAR_ENV})")
    p = sub.add_parser("steps", help="print the numbered workflow of a task")
    p.add_argument("task")
    p.add_argument("--path", help=f"STAR folder (default: ${STAR_ENV})")
    p.add_argument("--no-templates", action="store_true", help="leave out the response templates")
    p = sub.add_parser("download", help="download and extract STAR (network needed)")
    p.add_argument("dest")
    p.add_argument("--url", default=DEFAULT_STAR_URL, help="archive to download")
    p.add_argument("--force", action="store_true", help="replace an existing copy")
    return state_defaults(ap)


def main(argv: list[str] | None = None) -> int:
    """``python -m dialfork_dataset.star {summary,steps,download} ...``"""
    from .console import console

    args = build_parser().parse_args(argv)
    with console(args.verbose, args.quiet, fmt="%(levelname)s %(message)s"):
        return _main(args)


def _main(args) -> int:
    try:
        if args.cmd == "summary":
            print(json.dumps(StarCorpus(resolve_star(args.path)).summary(), indent=2))
        elif args.cmd == "steps":
            print(StarCorpus(resolve_star(args.path)).task(args.task).render_steps(
                with_templates=not args.no_templates))
        else:
            print(download_star(args.dest, args.url, force=args.force))
    except StarError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
