"""Names of the published layout: configs, gold files, links; where the gold goes by default."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..builder import CONFIGS

BLIND_CONFIG = "blind"
BLIND_PAIRS_CONFIG = "blind_task2"
GOLD_FILES = ("task3_gold.jsonl", "task2_gold.jsonl", "gold_manifest.json", "blind_key.json")
AUDIT_FILE = "audit_report.json"
CODE_URL = "https://github.com/idiap/dialfork"
LEADERBOARD_SPACE = "https://huggingface.co/spaces/idiap/dialfork-leaderboard"
METRIC_SPACES = ("flowscore", "flowdtw", "flowkl", "task3")
#: Compound forks (SPEC section 3, ours): a config of its own, written when the export is given a
#: compound corpus (``python -m generation --compound PLAN``); ``load_dataset(..., "compound")``.
COMPOUND_CONFIG = "compound"
#: Every config a layout may hold.
LAYOUT_CONFIGS: tuple[str, ...] = (*CONFIGS, COMPOUND_CONFIG, BLIND_CONFIG, BLIND_PAIRS_CONFIG)


class AuditFailed(RuntimeError):
    """The export's audit found a cheat; nothing was published. ``report`` is the audit report.

    Args:
        report: The audit report (``leaderboard.leakcheck``'s report object); kept as ``.report`` and
            its ``format_text()`` is appended to the message.
    """

    def __init__(self, report: Any):
        self.report = report
        super().__init__(
            "the leaderboard audit found a working cheat; the export was not published:\n"
            + report.format_text()
        )


def default_gold_dir(dest: str | os.PathLike) -> Path:
    """Where the gold of a layout goes by default: ``<dest>-gold``, next to the layout.

    Args:
        dest: The public layout folder (need not exist).

    Returns:
        Path: The absolute folder ``<parent of dest>/<name of dest>-gold``.
    """
    dest = Path(dest).resolve()
    return dest.parent / f"{dest.name}-gold"
