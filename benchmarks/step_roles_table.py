"""Write docs/step_roles.md: the derived step roles and slots of every STAR task.

The table is :func:`dialfork_dataset.workflow.roles.roles_table` over the 24 STAR tasks (sorted by name), by
the rule of :mod:`dialfork_dataset.workflow.roles` (docs/spec.md, "Step roles and slots").
tests/test_step_roles.py checks that the page equals what :func:`render` gives now, so the page
cannot go stale: rerun this script after a change to the rule.

Usage::

    python benchmarks/step_roles_table.py [--star DIR] [--out docs/step_roles.md]

STAR is read from ``--star``, else ``$DIALFORK_STAR_DIR``, else ``../shared/star`` beside the repo.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dialfork_dataset.star import StarCorpus  # noqa: E402
from dialfork_dataset.workflow.roles import roles_table  # noqa: E402

OUT = ROOT / "docs" / "step_roles.md"

HEADER = """# Step roles and slots of the STAR tasks

This page lists the step roles and slots that `dialfork_dataset.workflow.roles.derive_roles` derives for
every one of the 24 STAR tasks, by the rule stated in [the spec](spec.md) (section "Step roles and
slots"): for each action and query step of a task's workflow, its roles (greeting, question,
confirmation, action, outcome, inform, closing, fallback), the slots a question step collects and
the slots an action, outcome or confirmation step requires; then the API input each slot fills and
the value type a tracker reads it by. The state tracker and the step rules of the workflow-aware
detector `wf` read these roles. The page is generated: regenerate it with
`python benchmarks/step_roles_table.py` (tests/test_step_roles.py fails when it is stale).
"""


def star_dir() -> Path:
    """The STAR folder: ``$DIALFORK_STAR_DIR``, else ``../shared/star`` beside the repository."""
    env = os.environ.get("DIALFORK_STAR_DIR")
    return Path(env) if env else ROOT.parent / "shared" / "star"


def render(star: str | Path | None = None) -> str:
    """The text of docs/step_roles.md.

    Args:
        star: The STAR folder (None: :func:`star_dir`).

    Returns:
        str: The page: title, what the table is, then the roles table of every task.
    """
    corpus = StarCorpus(str(star if star is not None else star_dir()))
    tasks = [corpus.task(name) for name in sorted(corpus.tasks)]
    return HEADER + "\n" + roles_table(tasks).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the page.

    Args:
        argv: Command-line arguments (None: ``sys.argv``).

    Returns:
        int: The exit status.
    """
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--star", default=None, help="STAR folder (default: $DIALFORK_STAR_DIR or ../shared/star)"
    )
    ap.add_argument("--out", default=str(OUT), help="where to write the page")
    args = ap.parse_args(argv)
    text = render(args.star)
    Path(args.out).write_text(text, encoding="utf-8")
    print(f"wrote {args.out} ({text.count('### ')} tasks)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
