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

Modules: :mod:`.common` (constants, :class:`StarError`), :mod:`.scenarios`, :mod:`.api`,
:mod:`.graph` (node kinds, branch inference, numbered steps), :mod:`.task` (:class:`StarTask`),
:mod:`.corpus` (:class:`StarCorpus`), :mod:`.download` (:func:`resolve_star`, :func:`download_star`)
and :mod:`.cli` (``python -m dialfork_dataset.star``). Everything is importable from here. The
``star-human`` track of Task 3 (STAR's human dialogues and forks made by editing them) is a track:
:mod:`dialfork_dataset.tracks.star_human`.
"""

from __future__ import annotations

from .api import StarApi
from .cli import build_parser, main
from .common import (
    ANSWER_FAMILIES,
    DEFAULT_STAR_URL,
    QUERY_OUTCOME_FAMILIES,
    STAR_COMMIT,
    STAR_ENV,
    START_NODE,
    StarError,
    is_star_dir,
    task_domain,
)
from .corpus import StarCorpus
from .download import download_star, resolve_star
from .graph import WorkflowBranch, WorkflowStep, describe_node, infer_branch_parents, node_kinds
from .scenarios import Scenario, count_utterances, normalize_event, scenario_from_dialogue, scenario_from_row
from .task import StarTask

__all__ = [
    "ANSWER_FAMILIES",
    "DEFAULT_STAR_URL",
    "QUERY_OUTCOME_FAMILIES",
    "STAR_COMMIT",
    "STAR_ENV",
    "START_NODE",
    "Scenario",
    "StarApi",
    "StarCorpus",
    "StarError",
    "StarTask",
    "WorkflowBranch",
    "WorkflowStep",
    "build_parser",
    "count_utterances",
    "describe_node",
    "download_star",
    "infer_branch_parents",
    "is_star_dir",
    "main",
    "node_kinds",
    "normalize_event",
    "resolve_star",
    "scenario_from_dialogue",
    "scenario_from_row",
    "task_domain",
]
