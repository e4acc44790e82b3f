"""What a simulator-aware cheater reads in the public code, and the two attacks built from it.

Everything here comes from public material only:

* :class:`PhrasingTable`: every phrasing the template simulator can say for every node of every
  task (``generation.backends.template``'s task models over the public workflow source), as
  regular expressions with a wildcard per placeholder; it maps a system turn to its workflow node;
* :class:`PublicPools`: the lines only a hallucinating simulator says (the GR and CSC lines and the
  WIC bridges of the variant pool, ``generation/types/*.yaml``), the simulated user's reactions to one (the
  reaction pools of ``generation/template_data.yaml`` and the CSC ``user_replies``), pruned of
  every pattern that also matches a turn of a public conformant dialogue;
* :func:`fingerprint_predictions` (attack a): the first system turn that is a pool line, a WIC
  bridge, the backend's forced-difference fallback (``"Sorry, "`` + a lower-cased phrasing), another
  task's phrasing, or that the next user turn reacts to;
* :class:`NodeGrammar` (attack b): the node transitions of conformant dialogues regenerated with
  the public simulator and public seeds; the first system turn whose node (or transition) no
  conformant dialogue of the task has is flagged.

On an LLM-generated hidden set none of these patterns should match; the attacks then fall back
on Random or flag the first turn, and the audit passes them.
"""

from __future__ import annotations

import logging
import os
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger("leaderboard.leakcheck")

#: A ``{name}`` or ``{name:spec}`` field of a template (as the template backend fills them).
PLACEHOLDER = re.compile(r"\{(\w+)(?::[^}]*)?\}")
#: The user pools of ``template_data.yaml`` that the simulated user says only to a hallucinating
#: system (``generation/backends/template/realise.py``).
REACTION_POOLS = ("repeat_given", "confused", "wic_answer", "missing", "refuse", "aux_generic", "chaotic")
#: The backend's forced-difference fallback: when a fork's first turn equals D+'s, it says
#: ``"Sorry, "`` followed by the turn with a lower-cased first letter.
FALLBACK_PREFIX = "Sorry, "
#: Nodes the simulator says in front of the pending question (the off-topic reply): transparent
#: to the grammar.
TRANSPARENT_NODES = frozenset({"out_of_scope"})
START = "<s>"


def template_regex(template: str) -> str:
    """A regular expression matching every filling of ``template`` (each field a non-empty wildcard).

    Args:
        template: A template with ``{field}`` / ``{field:spec}`` placeholders.

    Returns:
        The pattern text: the literal parts escaped, each placeholder ``.+?``, whitespace runs as
        ``\\s+``.
    """
    out, pos = [], 0
    for m in PLACEHOLDER.finditer(template):
        out.append(_literal(template[pos : m.start()]))
        out.append(".+?")
        pos = m.end()
    out.append(_literal(template[pos:]))
    return "".join(out)


def _literal(s: str) -> str:
    return r"\s+".join(re.escape(w) for w in s.split(" "))


def _literal_len(template: str) -> int:
    return len(PLACEHOLDER.sub("", template))


#: A phrasing needs this many letters or digits outside its placeholders to name a node (a bare
#: ``{message}`` would match any turn).
MIN_LITERAL = 4


def _specific(template: str) -> bool:
    return sum(c.isalnum() for c in PLACEHOLDER.sub("", template)) >= MIN_LITERAL


def _first_word(template: str) -> str | None:
    """The first word every filling of ``template`` starts with; None when a placeholder touches it."""
    m = PLACEHOLDER.search(template)
    head = template if m is None else template[: m.start()]
    words = head.split()
    if not words or (m is not None and not head[len(head.rstrip()) :] and len(words) == 1):
        return None  # empty, or the placeholder continues the first word
    return words[0]


def _alternation(templates: Sequence[str]) -> re.Pattern[str] | None:
    """One pattern with a capturing group per template (most literal text first), or None."""
    if not templates:
        return None
    return re.compile("|".join(f"({template_regex(t)})" for t in templates), re.S)


# --------------------------------------------------------------------------- the phrasing table


class PhrasingTable:
    """Every phrasing of every node of every task, as the template simulator says them.

    A phrasing with fewer than :data:`MIN_LITERAL` letters or digits outside its placeholders is
    left out: it would match any turn.

    Args:
        phrasings: ``{task: {node: (phrasing, ...)}}`` (templates with ``{field}`` placeholders).
        reword_markers: The discourse markers the ``reword`` prefix mode puts in front of a system
            turn that has a single surface form (``template_data.yaml``'s ``reword.system``).
    """

    def __init__(
        self, phrasings: Mapping[str, Mapping[str, Sequence[str]]], reword_markers: Sequence[str] = ()
    ):
        self.tasks = sorted(phrasings)
        self._phrasings = {t: {n: tuple(ps) for n, ps in nodes.items()} for t, nodes in phrasings.items()}
        self._compiled: dict[str, tuple[re.Pattern[str] | None, list[str], re.Pattern[str] | None]] = {}
        self._markers = tuple(sorted({m.strip() for m in reword_markers if m.strip()}, key=len, reverse=True))
        self._cache: dict[tuple[str, str], str | None] = {}
        self._other: dict[tuple[str, str | None], str | None] = {}
        # the first word of every phrasing (None: a placeholder there), so that most tasks are ruled out
        # without running their patterns (an off-topic reply in front starts with one of them too)
        self._firsts: dict[str, set[str] | None] = {}
        self._by_first: dict[str, set[str]] = defaultdict(set)
        self._any_first: set[str] = set()
        for task, nodes in self._phrasings.items():
            firsts = {_first_word(p) for ps in nodes.values() for p in ps if _specific(p)}
            self._firsts[task] = None if None in firsts else firsts
            if None in firsts:
                self._any_first.add(task)
            for w in firsts - {None}:
                self._by_first[w].add(task)

    def _patterns(self, task: str) -> tuple[re.Pattern[str] | None, list[str], re.Pattern[str] | None]:
        """The task's alternation (one group per phrasing, most literal text first), the node of each
        group, and the off-topic prefix pattern; compiled on first use."""
        hit = self._compiled.get(task)
        if hit is None:
            nodes = self._phrasings[task]
            pairs = sorted(
                ((n, p) for n, ps in nodes.items() for p in dict.fromkeys(ps) if _specific(p)),
                key=lambda x: (-_literal_len(x[1]), x[0], x[1]),
            )
            oos = [p for n, ps in nodes.items() if n in TRANSPARENT_NODES for p in ps if _specific(p)]
            hit = (
                _alternation([p for _, p in pairs]),
                [n for n, _ in pairs],
                re.compile(r"(?:" + "|".join(template_regex(p) for p in oos) + r")\.?\s+(.+)", re.S)
                if oos
                else None,
            )
            self._compiled[task] = hit
        return hit

    @classmethod
    def from_source(cls, star: str | os.PathLike) -> PhrasingTable:
        """The table of the public template simulator over a workflow source.

        Args:
            star: The STAR folder (or ``workflow:PATH``) the simulator reads.

        Returns:
            The table of every task of the source.

        Raises:
            generation.errors.GenerationError: The source is missing or unusable.
        """
        from generation.backends.template import TemplateBackend
        from generation.engine import load_corpus

        corpus = load_corpus(str(star))
        backend = TemplateBackend()
        backend.bind_corpus(corpus)
        phr = {name: dict(backend.model(task).phr) for name, task in corpus.tasks.items()}
        return cls(phr, backend.data.get("reword", {}).get("system", ()))

    def _match(self, text: str, task: str) -> str | None:
        firsts, head = self._firsts[task], text.split(None, 1)[:1]
        if firsts is not None and head and head[0] not in firsts:
            return None  # no phrasing of the task starts with this word: its patterns are not run
        alt, nodes, _ = self._patterns(task)
        m = alt.fullmatch(text) if alt is not None else None
        return nodes[m.lastindex - 1] if m else None

    def node(self, text: str, task: str | None) -> str | None:
        """The node of ``task`` that says ``text`` (a reword marker in front is allowed; an
        off-topic reply in front of a question is the ``out_of_scope`` node).

        Args:
            text: A system turn.
            task: The task whose nodes are tried; None: none.

        Returns:
            The node name, or None when no phrasing of the task says ``text``.
        """
        if task is None or task not in self._phrasings:
            return None
        key = (text, task)
        if key in self._cache:
            return self._cache[key]
        text = text.strip()
        out = self._match(text, task)
        if out is None:
            for mk in self._markers:
                if text.startswith(mk + " "):
                    out = self._match(text[len(mk) + 1 :].strip(), task)
                    if out is not None:
                        break
        oos = self._patterns(task)[2]
        if out is None and oos is not None:
            m = oos.fullmatch(text)
            if m and self._match(m.group(1).strip(), task) is not None:
                out = "out_of_scope"
        self._cache[key] = out
        return out

    def other_task(self, text: str, task: str | None) -> str | None:
        """Another task whose phrasings say ``text`` while ``task``'s do not.

        Args:
            text: A system turn.
            task: The dialogue's task (None: every task counts as another).

        Returns:
            The first such task (in name order), or None.
        """
        key = (text, task)
        if key not in self._other:
            out = None
            if task is None or self.node(text, task) is None:
                words = {
                    w
                    for x in (
                        text,
                        *(text[len(mk) + 1 :] for mk in self._markers if text.startswith(mk + " ")),
                    )
                    for w in x.split(None, 1)[:1]
                }
                cands = self._any_first.union(*(self._by_first.get(w, ()) for w in words))
                out = next(
                    (t for t in self.tasks if t != task and t in cands and self.node(text, t) is not None),
                    None,
                )
            self._other[key] = out
        return self._other[key]

    def guess_task(self, system_texts: Sequence[str], candidates: Sequence[str] | None = None) -> str | None:
        """The task whose phrasings say most of ``system_texts``.

        Args:
            system_texts: The system turns of one dialogue.
            candidates: The tasks to choose from (e.g. the public configs' tasks, which the hidden
                split shares); None or empty: every task of the table.

        Returns:
            The task (ties: the first in name order), or None when no phrasing of a candidate says
            any turn.
        """
        tasks = [t for t in self.tasks if not candidates or t in candidates]
        counts = Counter({t: sum(self._match(x.strip(), t) is not None for x in system_texts) for t in tasks})
        best = max(tasks, key=lambda t: (counts[t], -tasks.index(t)), default=None)
        return best if best is not None and counts[best] > 0 else None


# --------------------------------------------------------------------------- the public pools


@dataclass
class PublicPools:
    """The lines only a hallucinating template simulator (or its user) says, as patterns.

    Attributes:
        system_lines: GR and CSC lines (full match).
        bridges: WIC bridges in front of a turn (a match leaves the rest in group 1).
        reactions: The user's reactions to a hallucinating system (full match).
        pruned: How many candidate patterns were dropped because a public conformant turn matches
            them.
    """

    system_lines: list[re.Pattern[str]] = field(default_factory=list)
    bridges: list[re.Pattern[str]] = field(default_factory=list)
    reactions: list[re.Pattern[str]] = field(default_factory=list)
    pruned: int = 0

    @classmethod
    def load(cls, conformant_system: Iterable[str] = (), conformant_user: Iterable[str] = ()) -> PublicPools:
        """The pools of the default variant pool and ``template_data.yaml``, pruned.

        Args:
            conformant_system: System turns of public conformant dialogues: a system pattern that
                matches one of them is dropped.
            conformant_user: User turns of public conformant dialogues: a reaction pattern that
                matches one of them is dropped.

        Returns:
            The pruned pools.
        """
        from generation.backends.template.data import load_template_data
        from generation.variants import load_variants

        pool, data = load_variants(), load_template_data()
        lines, bridges, reactions = [], [], []
        for htype in pool.types:
            for v in pool[htype]:
                lines += [str(x) for x in v.template.get("lines", ()) or ()]
                bridges += [str(x) for x in v.template.get("bridge", ()) or () if str(x).strip()]
                reactions += [str(x) for x in v.template.get("user_replies", ()) or ()]
        reactions += [str(x) for k in REACTION_POOLS for x in data["user"].get(k, ())]
        sys_texts, user_texts = set(conformant_system), set(conformant_user)
        out = cls()

        def keep(templates: Iterable[str], suffix: str, texts: set[str]) -> list[re.Pattern[str]]:
            kept = []
            for t in dict.fromkeys(templates):
                p = re.compile(template_regex(t) + suffix, re.S)
                hit = any(p.fullmatch(x) for x in texts)  # a conformant turn says it: not a fingerprint
                out.pruned += hit
                if not hit:
                    kept.append(p)
            return kept

        out.system_lines = keep(lines, "", sys_texts)
        out.bridges = keep(bridges, r"\s+(.+)", sys_texts)
        out.reactions = keep((x for x in reactions if PLACEHOLDER.sub("", x).strip()), "", user_texts)
        return out

    def is_line(self, text: str) -> bool:
        """Whether ``text`` is a GR or CSC line.

        Args:
            text: A system turn.

        Returns:
            True when one of :attr:`system_lines` matches the whole text.
        """
        return any(p.fullmatch(text) for p in self.system_lines)

    def bridge_rest(self, text: str) -> str | None:
        """The turn after a WIC bridge at the start of ``text``, or None.

        Args:
            text: A system turn.

        Returns:
            The rest of the turn after the first bridge that matches the whole text, or None when
            no bridge matches.
        """
        for p in self.bridges:
            m = p.fullmatch(text)
            if m:
                return m.group(1)
        return None

    def is_reaction(self, text: str) -> bool:
        """Whether the user turn ``text`` is a reaction to a hallucinating system.

        Args:
            text: A user turn.

        Returns:
            True when one of :attr:`reactions` matches the whole text.
        """
        return any(p.fullmatch(text) for p in self.reactions)


# --------------------------------------------------------------------------- attack (a): fingerprints


def system_turns(turns: Sequence[Mapping[str, Any]]) -> list[tuple[str, str | None]]:
    """Each system turn with the user turn that follows it.

    Args:
        turns: A dialogue's turns (``speaker``, ``text``).

    Returns:
        ``[(system text, next user text or None), ...]`` in order (system turn s is item s-1).
    """
    out: list[tuple[str, str | None]] = []
    for i, t in enumerate(turns):
        if t["speaker"] == "system":
            nxt = next((u["text"] for u in turns[i + 1 :] if u["speaker"] == "user"), None)
            out.append((t["text"].strip(), None if nxt is None else nxt.strip()))
    return out


@dataclass
class Fingerprinter:
    """Attack (a): the first system turn that only a hallucinating template simulator says.

    Attributes:
        pools: The public pools (:class:`PublicPools`).
        table: The phrasing table, or None (no workflow source: the fallback and another task's
            phrasing are then recognised from ``conformant_system`` only).
        conformant_system: System turns of public (or publicly regenerated) conformant dialogues:
            never flagged.
        conformant_by_task: ``{task: system turns}`` of those dialogues (another task's phrasing
            without a table).
    """

    pools: PublicPools
    table: PhrasingTable | None = None
    conformant_system: set[str] = field(default_factory=set)
    conformant_by_task: dict[str, set[str]] = field(default_factory=dict)

    def reason(self, text: str, task: str | None) -> str | None:
        """Why the system turn ``text`` gives a fork away, or None.

        Args:
            text: A system turn.
            task: The dialogue's (guessed) task, or None.

        Returns:
            ``"variant line"``, ``"WIC bridge"``, ``"forced-difference fallback"``,
            ``"another task's phrasing"`` or None.
        """
        if text in self.conformant_system:
            return None
        if self.pools.is_line(text):
            return "variant line"
        rest = self.pools.bridge_rest(text)
        if rest is not None and (
            self.table is None
            or self.table.other_task(rest.strip(), None) is not None
            or rest.strip() in self.conformant_system
        ):
            return "WIC bridge"
        own = self.table.node(text, task) if self.table is not None else None
        if own is not None:
            return None
        if text.startswith(FALLBACK_PREFIX) and text[len(FALLBACK_PREFIX) :][:1].islower():
            return "forced-difference fallback"
        if self.table is not None and task is not None and self.table.other_task(text, task) is not None:
            return "another task's phrasing"
        if (
            self.table is None
            and task is not None
            and text not in self.conformant_by_task.get(task, set())
            and any(text in v for t, v in self.conformant_by_task.items() if t != task)
        ):
            return "another task's phrasing"
        return None

    def first_turn(self, turns: Sequence[Mapping[str, Any]], task: str | None) -> tuple[int, str] | None:
        """The first fingerprinted system turn of a dialogue.

        Args:
            turns: The dialogue's turns.
            task: Its (guessed) task, or None.

        Returns:
            ``(system turn index 1..T, reason)``, or None (no fingerprint: called conformant).
        """
        for s, (text, nxt) in enumerate(system_turns(turns), 1):
            why = self.reason(text, task)
            if why is None and nxt is not None and self.pools.is_reaction(nxt):
                why = "user reaction"
            if why is not None:
                return s, why
        return None


# --------------------------------------------------------------------------- attack (b): the node grammar


class NodeGrammar:
    """Attack (b): the node transitions of conformant dialogues; a turn whose node or transition no
    conformant dialogue of the task has is flagged.

    Args:
        table: The phrasing table that maps a system turn to its node.
    """

    def __init__(self, table: PhrasingTable):
        self.table = table
        self.allowed: dict[str, set[tuple[str, str]]] = defaultdict(set)
        self.known: set[str] = set()
        self.dialogues = 0

    def _label(self, text: str, task: str | None) -> str | None:
        node = self.table.node(text, task)
        if node is not None:
            return node
        return "=" + text if text in self.known else None

    def fit(self, dialogues: Iterable[tuple[str, Sequence[Mapping[str, Any]], int | None]]) -> NodeGrammar:
        """Learn the transitions of conformant dialogues (or conformant prefixes).

        Args:
            dialogues: ``(task, turns, upto)``: a conformant dialogue (``upto`` None) or a fork whose
                first ``upto`` system turns are conformant (its prefix).

        Returns:
            ``self``.
        """
        items = [(task, system_turns(turns), upto) for task, turns, upto in dialogues]
        for task, sys_turns, upto in items:
            for text, _ in sys_turns[:upto]:
                if self.table.node(text, task) is None:
                    self.known.add(text)  # a conformant turn the table does not parse: its own node
        for task, sys_turns, upto in items:
            prev = START
            for text, _ in sys_turns[:upto]:
                lab = self._label(text, task)
                if lab in TRANSPARENT_NODES:
                    continue
                self.allowed[task].add((prev, lab))
                prev = lab
            self.dialogues += 1
        return self

    def first_violation(self, turns: Sequence[Mapping[str, Any]], task: str | None) -> int | None:
        """The first system turn the conformant grammar of ``task`` does not allow.

        Args:
            turns: A dialogue's turns.
            task: Its (guessed) task; a task the grammar has not seen flags turn 1.

        Returns:
            The system turn index (1..T), or None when every transition is allowed.
        """
        allowed = self.allowed.get(task or "", set())
        prev = START
        for s, (text, _) in enumerate(system_turns(turns), 1):
            lab = self._label(text, task)
            if lab in TRANSPARENT_NODES:
                continue
            if lab is None or (prev, lab) not in allowed:
                return s
            prev = lab
        return None


def fingerprint_predictions(
    fp: Fingerprinter,
    dialogues: Sequence[Mapping[str, Any]],
    tasks: Mapping[str, str | None],
    grammar: NodeGrammar | None = None,
) -> tuple[dict[str, int | None], Counter]:
    """Attack (a), or (a) + (b) with a grammar: every dialogue's first fingerprinted (or
    ungrammatical) system turn; None where there is none.

    Args:
        fp: The fingerprinter.
        dialogues: Rows with ``dialogue_id`` and ``turns``.
        tasks: ``{dialogue_id: guessed task or None}``.
        grammar: The node grammar (attack b), or None for the fingerprints alone.

    Returns:
        ``({dialogue_id: turn or None}, Counter of the reasons of the flags)``.
    """
    preds: dict[str, int | None] = {}
    why: Counter = Counter()
    for d in dialogues:
        task = tasks.get(d["dialogue_id"])
        hit = fp.first_turn(d["turns"], task)
        g = grammar.first_violation(d["turns"], task) if grammar is not None else None
        if g is not None and (hit is None or g < hit[0]):
            hit = (g, "grammar")
        preds[d["dialogue_id"]] = None if hit is None else hit[0]
        why[hit[1] if hit else "none"] += 1
    return preds, why


__all__ = [
    "FALLBACK_PREFIX",
    "REACTION_POOLS",
    "Fingerprinter",
    "NodeGrammar",
    "PhrasingTable",
    "PublicPools",
    "fingerprint_predictions",
    "system_turns",
    "template_regex",
]
