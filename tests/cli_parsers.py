"""Every command line's argument parser, for checks of what ``--help`` prints."""

from __future__ import annotations

import argparse
from collections.abc import Iterator


def all_parsers() -> dict[str, argparse.ArgumentParser]:
    """The top-level parser of each DialFork command line, by its ``python -m`` module."""
    from annotation.__main__ import build_parser as annotation
    from dialfork_dataset.__main__ import build_parser as dataset
    from dialfork_dataset.star.cli import build_parser as star
    from dialfork_metrics.audit.__main__ import build_parser as audit
    from dialfork_metrics.audit.demo import build_parser as audit_demo
    from dialfork_metrics.bench.cli import build_parser as bench
    from dialfork_metrics.guard.__main__ import _build_parser as guard
    from dialfork_metrics.task3.__main__ import _build_parser as task3
    from generation.options import build_parser as generation
    from leaderboard.__main__ import build_parser as leaderboard
    from leaderboard.app import build_parser as leaderboard_app

    return {
        "dialfork_dataset": dataset(),
        "dialfork_dataset.star": star(),
        "generation": generation(),
        "dialfork_metrics.bench": bench(),
        "dialfork_metrics.task3": task3(),
        "dialfork_metrics.guard": guard(),
        "dialfork_metrics.audit": audit(),
        "dialfork_metrics.audit.demo": audit_demo(),
        "leaderboard": leaderboard(),
        "leaderboard.app": leaderboard_app(),
        "annotation": annotation(),
    }


def all_help_texts() -> Iterator[tuple[str, str]]:
    """``(program and sub-commands, the --help text)`` of every parser and sub-command parser."""

    def walk(name: str, parser: argparse.ArgumentParser) -> Iterator[tuple[str, str]]:
        yield name, parser.format_help()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub_name, sub in action.choices.items():
                    yield from walk(f"{name} {sub_name}", sub)

    for module, parser in all_parsers().items():
        yield from walk(module, parser)
