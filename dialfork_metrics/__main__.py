"""``python -m dialfork_metrics``: the metric package's own commands.

``new-module NAME`` writes a registered metric's ``evaluate`` module folder from its registry entry
(:mod:`dialfork_metrics.module_folder`): ``dialfork_metrics/modules/<module>/`` by default, where
``dialfork_metrics.load(<module>)`` finds it. ``--import MODULE`` imports a module first (one that
registers metrics at run time), ``--level`` picks the level of a name registered at both,
``--out DIR`` writes elsewhere and ``--force`` replaces an existing folder's files.

The benchmark (``python -m dialfork_metrics.bench``), Task 3 (``python -m dialfork_metrics.task3``),
the guard and the audit have commands of their own.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from . import registry


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser.

    Returns:
        The parser (subcommand ``new-module``).
    """
    p = argparse.ArgumentParser(prog="python -m dialfork_metrics", description=__doc__.split("\n\n")[1])
    sub = p.add_subparsers(dest="command", required=True)
    n = sub.add_parser(
        "new-module",
        help="write a registered metric's evaluate module folder from its registry entry",
        description="Write <module>/ (<module>.py, README.md, app.py, requirements.txt) for a registered "
        "metric: its entry's module= (default its name), following docs/evaluate_modules.md.",
    )
    n.add_argument("name", help="the metric's registered name (dialfork_metrics.registry)")
    n.add_argument(
        "--level", choices=registry.LEVELS, help="pair or set (needed for a name registered at both)"
    )
    n.add_argument(
        "--out", help="the folder to write <module>/ in (default: the packaged dialfork_metrics/modules)"
    )
    n.add_argument("--force", action="store_true", help="replace the files of an existing folder")
    n.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (one that registers the metric at run time); repeatable",
    )
    return p


def _level(name: str, level: str | None) -> str:
    if level is not None:
        return level
    levels = [lv for lv in registry.LEVELS if name in registry.view(lv)]
    if len(levels) > 1:
        raise ValueError(f"metric {name!r} is registered at both levels; give --level pair or --level set")
    if not levels:
        registry.get(name, "pair")  # raises, listing the registered metrics
    return levels[0]


def main(argv: list[str] | None = None) -> int:
    """Run the command line.

    Args:
        argv: The arguments (default ``sys.argv[1:]``).

    Returns:
        The exit code: 0, or 2 with a one-line error on stderr.
    """
    from .module_folder import write_module_folder

    args = build_parser().parse_args(argv)
    try:
        for mod in args.imports:
            importlib.import_module(mod)
        level = _level(args.name, args.level)
        folder = write_module_folder(args.name, level, args.out, overwrite=args.force)
    except (ImportError, ValueError, FileExistsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(
        f"{folder}: {', '.join(sorted(p.name for p in folder.iterdir()))} (load it with evaluate.load({str(folder)!r}))"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
