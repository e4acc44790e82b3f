"""``python -m dialfork_dataset.star {summary,steps,download}``."""

from __future__ import annotations

import json
import sys

from .common import DEFAULT_STAR_URL, STAR_ENV, StarError
from .corpus import StarCorpus
from .download import download_star, resolve_star

_DESCRIPTION = (
    "Reader of the STAR corpus (Mosig, Mehri and Kober, 2020): task workflows, APIs, scenarios, dialogues."
)


def build_parser():
    """The parser of ``python -m dialfork_dataset.star``.

    Subcommands: ``summary [path]``, ``steps TASK [--path] [--no-templates]`` and ``download DEST
    [--url] [--force]``, plus the verbosity options.

    Returns:
        argparse.ArgumentParser: The parser (a subcommand is required).
    """
    import argparse

    from ..console import add_verbosity_options, state_defaults

    ap = argparse.ArgumentParser(prog="python -m dialfork_dataset.star", description=_DESCRIPTION)
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
    """``python -m dialfork_dataset.star {summary,steps,download} ...``

    ``summary`` prints the counts of a STAR copy as JSON, ``steps`` a task's numbered workflow,
    ``download`` the folder STAR was extracted to.

    Args:
        argv: The arguments (without the program name); None reads ``sys.argv``.

    Returns:
        int: The exit status: 0 on success, 2 on a :class:`StarError` (one ``error: ...`` message
        on stderr). Bad arguments exit through argparse (status 2).
    """
    from ..console import console

    args = build_parser().parse_args(argv)
    with console(args.verbose, args.quiet, fmt="%(levelname)s %(message)s"):
        return _main(args)


def _main(args) -> int:
    try:
        if args.cmd == "summary":
            print(json.dumps(StarCorpus(resolve_star(args.path)).summary(), indent=2))
        elif args.cmd == "steps":
            print(
                StarCorpus(resolve_star(args.path))
                .task(args.task)
                .render_steps(with_templates=not args.no_templates)
            )
        else:
            print(download_star(args.dest, args.url, force=args.force))
    except StarError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    return 0
