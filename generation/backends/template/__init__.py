"""The template backend: a deterministic two-agent simulator built from STAR's own material.

No LLM. The *system* walks the task graph from ``hello`` and says each node's response template or
one of its phrasings from ``wizard_nlu_training_data.md``; it fills ``{placeholders}`` from the
values the user gave and from a knowledge-base item drawn from ``apis/dbs/<db>.json`` (STAR ships
the *schemas* of its knowledge bases, field names with categories and ranges, so the item is drawn
from that schema, consistent with the user's constraints); at query nodes it looks the request up
(happy scenarios succeed, unhappy ones succeed or fail by a seeded hash of the request) to take
the ``available``/``unavailable``, ``query_success``/``query_failure`` branch, and ``yes``/``no``
(and trivia's and trip's answers) follow what the user said. The *user* holds goal values taken
from the scenario text (``user_task``) and the task's API categories, opens with a greeting,
states the request when asked, answers each question with the slot asked for (several
phrasings), answers yes/no questions, sometimes chats off-topic (then the system's
``out_of_scope`` reply), and closes at ``anything_else``. All phrasing pools are in
``generation/template_data.yaml``.

Hallucinations, realised from system turn t_k on (the engine sets ``state.injected`` there):

* WIC: the system follows the substitute task's workflow (its happy path, starting at a step the
  original task does not have), with the variant's bridge sentence;
* SSPC: the variant's strategy applied to D+'s remaining steps (repeat a completed step, skip a
  required step, reverse, jump to the outcome then carry on, chaotic order);
* GR: a goal-replacement line of the variant, then the workflow's steps with the outcome steered
  to another value (``{alt}``) and pitches appended now and then;
* CSC: an auxiliary-goal line of the variant, then the workflow with the auxiliary goal
  intermittently prepended.

The user reacts (confusion, refusal, "I already told you", answering the odd question...). The
number of hallucinated steps matches D+'s remaining steps up to +-1 whatever k is, so forks are
not detectable by their length alone, and every fork's system turn t_k differs from D+'s (checked,
re-phrased if needed), so the ground truth is exact. Every choice is drawn from a SplitMix64
stream keyed by (dialogue seed, turn index): a replayed fork reproduces D+'s prefix exactly.

``reword`` prefix mode (``Dialogue.reword_rate``): each prefix turn of a fork is, with that
probability (drawn per dialogue seed, turn, type and k), realised with another phrasing of the same
dialogue act: the turn runs on a :class:`RewordRng`, which draws exactly what the plain stream draws
(same decisions, same workflow path, same state at t_k) but moves every phrasing pick to another
entry of its pool; a turn with a single surface form gets a discourse marker
(``template_data.yaml``: ``reword``) instead. Once a prefix turn is reworded, every later prefix
turn is reworded too, as in LLM replay where one changed turn changes the context of all later ones
(with independent per-turn rewording, counting identical turns would recover t_k exactly: the
leaderboard audit's pair-diffing attack). From t_k on the fork is the replayed fork.

Modules: :mod:`.data` (phrasing pools, name conventions, the ``reword`` stream), :mod:`.model` (what
the simulator knows about a task), :mod:`.values` (goal and knowledge-base values), :mod:`.sim` (the
per-dialogue state and graph walk), :mod:`.acts` (shared dialogue acts), :mod:`.turns` (conformant
turns), :mod:`.planners` (a type's planner, from its registry entry: :func:`~.planners.planner_for`; the built-in types' planners are in ``generation/types/``), :mod:`.realise`
(saying the plan), :mod:`.backend` (:class:`TemplateBackend`). The public names of ``__all__`` are
re-exported here.
"""

from __future__ import annotations

from .acts import answer_slot, criteria_reply, enter_node, goodbye, read_answer, user_line
from .backend import TemplateBackend
from .data import (
    ASK_ALIASES,
    DATA_PATH,
    GENERIC_NODES,
    PH_ALIASES,
    RewordRng,
    load_template_data,
    pick_phrasing,
)
from .model import Slot, TaskModel
from .planners import PlanContext, Planner, build_hal, planner_for
from .realise import hal_system_turn, hal_user_turn
from .sim import Hal, Sim
from .turns import system_turn, user_turn

__all__ = [
    "ASK_ALIASES",
    "DATA_PATH",
    "GENERIC_NODES",
    "PH_ALIASES",
    "Hal",
    "PlanContext",
    "Planner",
    "RewordRng",
    "Sim",
    "Slot",
    "TaskModel",
    "TemplateBackend",
    "answer_slot",
    "build_hal",
    "criteria_reply",
    "enter_node",
    "goodbye",
    "hal_system_turn",
    "hal_user_turn",
    "load_template_data",
    "pick_phrasing",
    "planner_for",
    "read_answer",
    "system_turn",
    "user_line",
    "user_turn",
]
