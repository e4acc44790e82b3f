"""The :class:`TemplateBackend`: the registry's ``template`` backend (see the package doc)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dialfork_dataset.taxonomy import type_index

from ...prompts import END_TOKEN
from ...seeds import Rng
from ..base import TurnRequest
from .acts import goodbye, user_line
from .data import DATA_PATH, RewordRng, load_template_data
from .model import TaskModel
from .planners import build_hal
from .realise import hal_system_turn
from .sim import Sim
from .turns import system_turn, user_turn


class TemplateBackend:
    """Deterministic CPU backend (see the module doc). ``generate`` reads ``TurnRequest.state``
    (the engine's :class:`~generation.engine.Dialogue`); ``messages`` are ignored.

    Args:
        data_path: a template-data YAML file with the phrasing pools; ``None`` (default) uses the
            packaged :data:`~generation.backends.template.data.DATA_PATH`.

    Raises:
        ValueError: the data file is not a template-backend data file.
        OSError: the data file cannot be read.
    """

    name = "template"
    uses_messages = False
    exact = True
    """Forks are exact: system turn t_k always differs from D+'s, replayed prefixes are identical."""
    rewords = True
    """Supports the ``reword`` prefix mode (``Dialogue.reword_rate``)."""
    requires = ("surface_templates",)
    """What the source must give every task (:func:`dialfork_dataset.sources.require`)."""

    def __init__(self, data_path: str | None = None):
        self.data = load_template_data(str(data_path) if data_path else str(DATA_PATH))
        self._models: dict[int, TaskModel] = {}
        self._dbs: dict[int, dict[str, Any]] = {}

    def decoding(self) -> dict[str, Any]:
        """No sampling: every decoding field is ``None``.

        Returns:
            ``{"temperature": None, "top_p": None, "top_k": None, "max_new_tokens": None}``.
        """
        return {"temperature": None, "top_p": None, "top_k": None, "max_new_tokens": None}

    def model(self, task: Any) -> TaskModel:
        """The simulator's model of ``task``, built once per task object (with its happy path).

        Args:
            task: a workflow task of the bound source.

        Returns:
            The cached :class:`TaskModel`.

        Raises:
            RuntimeError: :meth:`bind_corpus` was not called first.
        """
        key = id(task)
        m = self._models.get(key)
        if m is None:
            m = TaskModel(task, self._task_dbs(task), self.data)
            self._models[key] = m
            _happy_walk(m, self.data)
        return m

    def bind_corpus(self, corpus: Any) -> None:
        """Called by the engine before generating: gives access to the knowledge-base schemas.

        Args:
            corpus: the workflow source; its ``dbs`` are kept.
        """
        self._corpus_dbs = corpus.dbs

    def _task_dbs(self, task: Any) -> dict[str, Any]:
        dbs = getattr(self, "_corpus_dbs", None)
        if dbs is None:
            raise RuntimeError("TemplateBackend: call bind_corpus(corpus) first (the engine does it)")
        return dbs

    def generate(self, requests: Sequence[TurnRequest]) -> list[str]:
        """One utterance per request, each from its own seeded stream (independent of the batch).

        Args:
            requests: the batch; each ``state`` must be the engine's Dialogue.

        Returns:
            The utterances, in request order (a closing one ends with
                :data:`~generation.prompts.END_TOKEN`).

        Raises:
            ValueError: a request has no ``state``.
            RuntimeError: :meth:`bind_corpus` was not called first, or (``reuse`` mode) the
                simulator does not reproduce a copied prefix.
        """
        return [self._one(r) for r in requests]

    def _one(self, req: TurnRequest) -> str:
        d = req.state
        if d is None:
            raise ValueError(
                f"{req.dialogue_key}: the template backend needs TurnRequest.state (the engine's Dialogue)"
            )
        sim = d.scratch.get("sim")
        if sim is None:
            sim = d.scratch["sim"] = Sim(self.model(d.task), d.scenario, d.seed, self.data)
            if d.turns:  # reuse mode: rebuild the simulator over the copied prefix
                self._fast_forward(sim, d)
        return self._turn(sim, d, req.role, req.turn_index)

    def _turn(self, sim: Sim, d: Any, role: str, turn_index: int) -> str:
        if d.fork is not None and d.injected:
            f = d.fork
            rng = Rng(d.seed, turn_index, 1000 + type_index(f.htype) * 10 + f.k)
            if role == "system":
                if sim.hal is not None and sim.hal.spec is not f and not d.wrapped:
                    sim.hal = None  # a compound fork's next injection: a new plan from D+'s steps at its turn
                if sim.hal is not None and d.wrapped:
                    sim.trace.append(sim.m.bye or "bye")
                    return goodbye(sim, rng) + " " + END_TOKEN
                if sim.hal is None:
                    # system turn t_k: the first hallucinated turn, guaranteed to differ from D+'s
                    sim.hal = hal = build_hal(sim, d, rng, self)
                    snap = (hal.pos, hal.closing, len(sim.trace), sim.prev)
                    text = hal_system_turn(sim, d, rng, self)
                    ref = (
                        d.reference.turns[len(d.turns)]["text"]
                        if len(d.reference.turns) > len(d.turns)
                        else None
                    )
                    tries = 0
                    while ref is not None and strip_end(text) == ref and tries < 4:
                        tries += 1
                        hal.pos, hal.closing, sim.prev = snap[0], snap[1], snap[3]
                        del sim.trace[snap[2] :]
                        text = hal_system_turn(sim, d, Rng(d.seed, turn_index, 5000 + tries), self)
                    if ref is not None and strip_end(text) == ref:
                        text = "Sorry, " + text[:1].lower() + text[1:]
                    return text
                return hal_system_turn(sim, d, rng, self)
            if sim.hal is not None and sim.hal.closing:
                if sim.hal.closing == 1:
                    return user_line(sim.data, "close", rng)
            return user_turn(sim, d, rng)
        if d.fork is not None and d.reword_rate:  # a prefix turn of a fork in ``reword`` mode
            return self._reword_turn(sim, d, role, turn_index, d.reword_rate)
        rng = Rng(d.seed, turn_index)
        if role == "system":
            return system_turn(sim, d, rng, d.seed)
        return user_turn(sim, d, rng)

    def _reword_turn(self, sim: Sim, d: Any, role: str, turn_index: int, rate: float) -> str:
        """A prefix turn (before t_k) realised, with probability ``rate``, with another surface form of
        the dialogue act D+ has there; otherwise D+'s turn exactly. The decision is drawn per
        (dialogue seed, turn, type, k), so the 16 forks of a source are reworded independently, and
        once a prefix turn is reworded every later prefix turn is too (``rate`` is the per-turn
        hazard of the first rewording)."""
        f = d.fork
        salt = 7000 + type_index(f.htype) * 10 + f.k
        sel = Rng(d.seed, turn_index, salt)
        # the rewording cascades, as in LLM replay (one changed turn changes the context of every
        # later one): a turn is reworded when its own draw or any earlier prefix turn's draw hits.
        # Stateless (recomputed from the seed), so it survives resume; the first reworded turn, and
        # so the Shared-prefix control, has the same distribution as with independent draws.
        hit = sel.random() < rate or any(Rng(d.seed, j, salt).random() < rate for j in range(turn_index))
        if not hit:
            rng = Rng(d.seed, turn_index)
            return system_turn(sim, d, rng, d.seed) if role == "system" else user_turn(sim, d, rng)
        rng = RewordRng(d.seed, turn_index, shift=1 + sel.below(1 << 30))
        text = system_turn(sim, d, rng, d.seed) if role == "system" else user_turn(sim, d, rng)
        ref = d.reference.turns[turn_index]["text"] if len(d.reference.turns) > turn_index else None
        if ref is not None and strip_end(text) == ref:
            # a turn with a single surface form (a bare value, a template with placeholders): add a
            # discourse marker instead
            markers = self.data["reword"][role]
            text = f"{markers[sel.below(len(markers))]} {text}"
        return text

    def _fast_forward(self, sim: Sim, d: Any) -> None:
        class _Replay:
            def __init__(self, dd):
                self.turns, self.wrapped, self.fork, self.injected = [], False, None, False
                self.seed, self.scenario = dd.seed, dd.scenario

        shadow = _Replay(d)
        for i, t in enumerate(d.turns):
            shadow.wrapped = i >= d.budget
            text = self._turn(sim, shadow, t["speaker"], i)
            if strip_end(text) != t["text"]:
                raise RuntimeError(
                    f"{d.key}: the template simulator does not reproduce the copied prefix at turn {i}"
                )
            shadow.turns.append(t)


def strip_end(text: str) -> str:
    """``text`` without the closing token, stripped (what the engine records).

    Args:
        text: an utterance.

    Returns:
        ``text`` with every :data:`~generation.prompts.END_TOKEN` removed and surrounding
            whitespace stripped.
    """
    return text.replace(END_TOKEN, "").strip()


def _happy_walk(m: TaskModel, data: dict[str, Any]) -> None:
    """The task's happy path (nodes the system says when everything succeeds), and its outcome:
    the last content step before ``anything_else``/goodbye."""

    class _Sc:
        happy = True
        user_task = ""
        user_guide = ()

    class _D:
        def __init__(self):
            self.turns: list[dict[str, str]] = []
            self.wrapped = False
            self.fork = None
            self.injected = False

    sim = Sim(m, _Sc(), 0, data)
    d = _D()
    for i in range(60):
        role = "user" if i % 2 == 0 else "system"
        text = system_turn(sim, d, Rng(0, i), 0) if role == "system" else user_turn(sim, d, Rng(0, i))
        d.turns.append({"speaker": role, "text": text})
        if END_TOKEN in text:
            break
    trace = [n for n in sim.trace if n in m.phr]
    m.happy_trace = tuple(trace)
    body = [
        n
        for n in trace
        if n not in (m.start, m.anything_else, m.bye) and "bye" not in n and n not in m.is_search_more
    ]
    m.outcome = body[-1] if body else None


__all__ = ["TemplateBackend", "strip_end"]
