"""Console set-up shared by the DialFork command lines (``dialfork-*`` / ``python -m ...``).

* :func:`add_verbosity_options` adds ``-v/--verbose`` (one level more) and ``-q/--quiet`` (errors
  only, no progress bars) to a parser, the same way in every CLI.
* :func:`console` configures logging for the run and routes log lines through ``tqdm.write``
  (tqdm's ``logging_redirect_tqdm``), so that a log line never tears a progress bar apart.
  With ``quiet=True`` it also turns every progress bar off: ours (:func:`progress_disabled`),
  tqdm's default (``TQDM_DISABLE``) and the Hugging Face libraries' bars.
* :func:`prog_name` gives the name a CLI was started under: the console script
  (``dialfork-bench``) or ``python -m package``, for ``usage:`` lines.

Library code only logs; only these CLI entry points decide what reaches the terminal.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: Environment variables that switch progress bars off: tqdm's own default (``disable``), the
#: Hub client's and datasets' bars (transformers follows the Hub client's setting).
QUIET_ENV = ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS")

DEFAULT_FORMAT = "%(levelname)s %(name)s: %(message)s"

_QUIET = False


def progress_disabled() -> bool:
    """Whether progress bars are off for this process (``-q`` of a CLI, or ``TQDM_DISABLE=1``).

    Returns:
        bool: True inside a quiet :func:`console` block, or when ``TQDM_DISABLE`` is ``1``,
        ``true`` or ``yes`` (any case).
    """
    return _QUIET or os.environ.get("TQDM_DISABLE", "").strip().lower() in ("1", "true", "yes")


def prog_name(module: str) -> str:
    """``usage:`` name of a CLI: the console script's name when started as one (``dialfork-bench``),
    else ``python -m <module>``.

    Args:
        module: The CLI's module (e.g. ``"dialfork_metrics.bench"``).

    Returns:
        str: ``sys.argv[0]``'s name when it starts with ``dialfork-``, else ``"python -m
        <module>"``.
    """
    argv0 = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    if argv0.startswith("dialfork-"):
        return argv0
    return f"python -m {module}"


def plain_text(doc: str) -> str:
    """A docstring as terminal help: reStructuredText's inline literals ````x```` become ``x`` and
    roles such as ``:func:`x``` become ``x``, since ``--help`` prints text as is.

    Args:
        doc: The text (e.g. a module's ``__doc__``).

    Returns:
        str: The text without the markup.

    >>> plain_text("``python -m x``: see :func:`load`")
    'python -m x: see load'
    """
    import re

    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", doc or "")
    return re.sub(r"``([^`]+)``", r"\1", text)


def add_verbosity_options(parser: argparse.ArgumentParser, default: str = "INFO") -> None:
    """``-v/--verbose`` and ``-q/--quiet`` (mutually exclusive); ``default`` names the log level
    without either.

    Args:
        parser: The parser to add the two flags to (as ``args.verbose`` / ``args.quiet``).
        default: The log level name without either flag (``"INFO"`` or ``"WARNING"``); only
            used in the help text here (pass the same to :func:`console`).
    """
    more = logging.getLevelName(_more_verbose(logging.getLevelName(default))).lower()
    g = parser.add_mutually_exclusive_group()
    g.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help=f"log lines from {more} up (default: off, {default.lower()} and up)",
    )
    g.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="errors only: no log lines below ERROR and no progress bars (default: off)",
    )


def state_defaults(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Make every option's help state its default, in this parser and its sub-commands: help
    that does not mention one gets ``(default: ...)`` appended (``off`` for a flag, ``none`` for
    ``None``). Returns the parser.

    Positional, required and suppressed arguments, ``--help``/``--version`` and help that already
    mentions a default are left alone.

    Args:
        parser: The parser, changed in place (sub-commands too).

    Returns:
        argparse.ArgumentParser: ``parser``.
    """
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                state_defaults(sub)
            continue
        if (
            not action.option_strings
            or action.required
            or action.help == argparse.SUPPRESS
            or action.default == argparse.SUPPRESS
        ):
            continue
        if isinstance(action, argparse._HelpAction | argparse._VersionAction):
            continue
        text = action.help or ""
        if "default" in text.lower():
            continue
        if isinstance(action, argparse._StoreTrueAction):
            d = "off"
        elif isinstance(action, argparse._StoreFalseAction):
            d = "on"
        elif action.default is None or action.default == []:
            d = "none"
        else:
            d = str(action.default).replace("%", "%%")
        action.help = (text + " " if text else "") + f"(default: {d})"
    return parser


@contextmanager
def console(
    verbose: bool = False, quiet: bool = False, default: str | int = logging.INFO, fmt: str = DEFAULT_FORMAT
) -> Iterator[None]:
    """Configure logging and progress bars for one CLI run (see the module doc).

    The level is ``default`` (INFO or WARNING), one step more verbose with ``verbose``, ERROR
    with ``quiet``. Handlers are
    (re)installed on the root logger, and log lines go through ``tqdm.write`` while the block
    runs; the previous logging state, environment and quiet flag are restored afterwards.

    Args:
        verbose: One level more verbose than ``default`` (WARNING -> INFO -> DEBUG).
        quiet: ERROR only, and every progress bar off (ours, tqdm's default via
            :data:`QUIET_ENV`, and the Hugging Face libraries' bars).
        default: The log level without ``verbose``/``quiet``: a level name or number.
        fmt: The ``logging.Formatter`` format of the console handler.

    Yields:
        None: Control, with logging configured; on exit the previous state is restored.
    """
    global _QUIET
    from tqdm.contrib.logging import logging_redirect_tqdm

    default = logging.getLevelName(default) if isinstance(default, str) else default
    level = _more_verbose(default) if verbose else logging.ERROR if quiet else default
    root = logging.getLogger()
    old_level, old_handlers = root.level, list(root.handlers)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(fmt))
    # keep foreign handlers that do not print (a test's log capture); replace console ones
    root.handlers = [h for h in old_handlers if not _prints(h)] + [handler]
    root.setLevel(level)
    old_env = {k: os.environ.get(k) for k in QUIET_ENV}
    old_quiet = _QUIET
    if quiet:
        _QUIET = True
        for k in QUIET_ENV:
            os.environ[k] = "1"
        _quiet_loaded_libraries()
    try:
        with logging_redirect_tqdm(loggers=[root]):
            yield
    finally:
        root.handlers = old_handlers
        root.setLevel(old_level)
        _QUIET = old_quiet
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _more_verbose(level: int) -> int:
    """One step more verbose: WARNING -> INFO -> DEBUG."""
    return max(logging.DEBUG, level - 10)


def _prints(h: logging.Handler) -> bool:
    return type(h) is logging.StreamHandler and getattr(h, "stream", None) in (sys.stderr, sys.stdout)


def _quiet_loaded_libraries() -> None:
    """Turn off the bars of Hugging Face libraries already imported (they read their environment
    variable at import time)."""
    mods = sys.modules
    if "datasets" in mods:
        try:
            mods["datasets"].disable_progress_bars()
        except AttributeError:  # pragma: no cover - very old datasets
            pass
    if "huggingface_hub" in mods:
        try:
            from huggingface_hub.utils import disable_progress_bars

            disable_progress_bars()
        except ImportError:  # pragma: no cover
            pass
    if "transformers" in mods:
        try:
            from transformers.utils import logging as tlog

            tlog.disable_progress_bar()
        except ImportError:  # pragma: no cover
            pass


__all__ = [
    "QUIET_ENV",
    "add_verbosity_options",
    "console",
    "plain_text",
    "progress_disabled",
    "prog_name",
    "state_defaults",
]
