"""What a ``--data``-like argument names: one resolver for every command line that takes a corpus.

A DialFork corpus is given as a Hub-layout folder (``python -m dialfork_dataset export``), a
generator output folder (``*.jsonl`` records and ``manifest.json``), a Hub dataset id such as
``idiap/dialfork``, or, for scoring, a gold folder (``task3_gold.jsonl``, ``gold_manifest.json``).
:func:`resolve_data` tells which, before anything is loaded, and refuses what cannot work with a
message that says what was wrong and how to fix it:

* a path that does not exist is "no such folder" (with the closest names of its parent folder);
  when the name could also be a Hub id (``owner/name``) and the Hub is offline with no cached copy,
  the message says so too, instead of the Hub client's ``ConnectionError``;
* a gold folder where the public layout is expected (``dialfork_dataset check demo_out/hub-gold``)
  is named as such, and so is a public layout where the gold is expected;
* a folder that is none of the kinds the caller accepts lists what was expected.

The errors are :class:`DataSourceError` (a ``ValueError``); :class:`DataNotFoundError` is also a
``FileNotFoundError``. Command lines print them as one ``error:`` line and exit with status 2.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

#: The kinds of corpus argument :func:`resolve_data` tells apart.
KINDS = ("layout", "corpus", "hub", "gold")

#: Files that make a folder a gold folder (written by ``export`` next to the layout, never inside).
GOLD_MARKERS = ("gold_manifest.json", "task3_gold.jsonl", "task2_gold.jsonl")

_HUB_ID_RE = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}")
_TRUE = ("1", "on", "yes", "true")

_KIND_WORDS = {
    "layout": "a Hub-layout folder (python -m dialfork_dataset export)",
    "corpus": "a generator output folder or record file (python -m generation)",
    "hub": "a Hub dataset id such as idiap/dialfork",
    "gold": "a gold folder (task3_gold.jsonl, gold_manifest.json: export's --gold-dir)",
}


class DataSourceError(ValueError):
    """A corpus argument that names nothing usable; the message says what and how to fix it."""


class DataNotFoundError(DataSourceError, FileNotFoundError):
    """A corpus argument that names no existing folder (and no reachable Hub dataset)."""


@dataclass(frozen=True)
class DataSource:
    """A resolved corpus argument.

    Attributes:
        kind: ``"layout"``, ``"corpus"``, ``"hub"`` or ``"gold"`` (:data:`KINDS`).
        value: The argument as given.
        path: The local folder or file; None for a Hub id.
    """

    kind: str
    value: str
    path: Path | None = None

    @property
    def is_local(self) -> bool:
        """Whether the source is a local folder or file (not a Hub id)."""
        return self.path is not None


def looks_like_hub_id(value: str) -> bool:
    """Whether ``value`` has the shape of a Hub dataset id, ``owner/name`` (one slash, no ``./``).

    Args:
        value: The argument as given.

    Returns:
        bool: True for ``idiap/dialfork`` or ``demo_out/hubb``; False for ``./x``, ``/abs/x``,
        ``a/b/c`` or a name without a slash.
    """
    return bool(_HUB_ID_RE.fullmatch(value)) and not value.endswith((".jsonl", ".json", ".gz", ".parquet"))


def hub_offline() -> bool:
    """Whether the Hugging Face clients are told to stay offline (``HF_HUB_OFFLINE`` or
    ``HF_DATASETS_OFFLINE`` set to 1/ON/YES/TRUE).

    Returns:
        bool: True when either variable is set to a true value.
    """
    return any(
        os.environ.get(k, "").strip().lower() in _TRUE for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def hub_cached(repo_id: str) -> bool:
    """Whether a copy of the Hub dataset ``repo_id`` is in a local Hugging Face cache (the Hub
    client's ``datasets--owner--name`` or the ``datasets`` library's ``owner___name``), so that
    ``load_dataset`` can read it offline.

    Args:
        repo_id: ``owner/name``.

    Returns:
        bool: True when either cache folder exists.
    """
    owner, _, name = repo_id.partition("/")
    hf_home = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
    hub_cache = Path(
        os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE") or hf_home / "hub"
    )
    ds_cache = Path(os.environ.get("HF_DATASETS_CACHE") or hf_home / "datasets")
    return (hub_cache / f"datasets--{owner}--{name}").is_dir() or (ds_cache / f"{owner}___{name}").is_dir()


def classify_folder(path: str | os.PathLike) -> str | None:
    """The kind of an existing local folder or file: ``"layout"`` (it has ``data/``), ``"gold"``
    (a gold marker file and no ``data/``), ``"corpus"`` (a ``manifest.json`` or ``*.jsonl``
    files whose rows carry ``turns``; or a record file), else None.

    Args:
        path: An existing folder or file.

    Returns:
        str | None: The kind, or None when it is none of them.
    """
    p = Path(path)
    if p.is_file():
        if p.name in GOLD_MARKERS:
            return "gold"
        return "corpus" if p.name.endswith((".jsonl", ".jsonl.gz")) else None
    if (p / "data").is_dir():
        return "layout"
    if any((p / m).is_file() for m in GOLD_MARKERS):
        return "gold"
    try:
        from ..builder import record_files

        files = record_files(p)
    except (FileNotFoundError, OSError):
        return None
    # a folder of predictions or other JSON lines is no corpus: the generator writes a manifest,
    # and its records carry turns
    if (p / "manifest.json").is_file() or any(_holds_records(f) for f in files[:8]):
        return "corpus"
    return None


def _holds_records(path: Path) -> bool:
    """Whether the first JSON line of a ``*.jsonl`` or ``*.jsonl.gz`` file looks like a dialogue record."""
    from ..jsonl import iter_jsonl

    try:
        for _, row in iter_jsonl(path):
            return isinstance(row, dict) and "turns" in row
    except (OSError, ValueError, EOFError):
        return False
    return False


def _near_names(path: Path) -> list[str]:
    """Existing siblings of a missing path whose names are close to its name."""
    parent = path.parent if str(path.parent) not in ("", ".") else Path(".")
    try:
        names = [c.name for c in parent.iterdir() if not c.name.startswith(".")]
    except OSError:
        return []
    close = difflib.get_close_matches(path.name, names, n=3, cutoff=0.6)
    return [str(path.parent / n) if str(path.parent) not in ("", ".") else n for n in close]


def _accepted(accept: Iterable[str]) -> str:
    words = [_KIND_WORDS[k] for k in accept]
    return ", ".join(words[:-1]) + (" or " if len(words) > 1 else "") + words[-1]


def _gold_partner(path: Path) -> Path | None:
    """The public layout next to a gold folder ``X-gold`` (``X``), if it is one."""
    if path.name.endswith("-gold"):
        partner = path.with_name(path.name[: -len("-gold")])
        if (partner / "data").is_dir():
            return partner
    return None


def resolve_data(
    value: str | os.PathLike,
    *,
    accept: Iterable[str] = ("layout", "corpus", "hub"),
    option: str | None = None,
) -> DataSource:
    """Tell what a corpus argument names, or raise with what to do instead.

    Args:
        value: The argument as given (a folder, a record file, a Hub id).
        accept: The kinds the caller can use, among :data:`KINDS` (default: a layout, a
            generator output folder or a Hub id).
        option: The option's name for the messages (``"--data"``); None: the value alone.

    Returns:
        DataSource: The kind and, for a local one, its path.

    Raises:
        DataNotFoundError: No such local folder or file, and (for a name shaped like a Hub id)
            the Hub is offline with no cached copy, or Hub ids are not accepted.
        DataSourceError: The folder is of a kind the caller does not accept (a gold folder where
            the dialogues are needed, a public layout where the gold is), or of no known kind.
        ValueError: ``accept`` names an unknown kind.
    """
    accept = tuple(accept)
    bad = [k for k in accept if k not in KINDS]
    if bad or not accept:
        raise ValueError(f"accept must name kinds among {', '.join(KINDS)}, got {accept!r}")
    text = os.fspath(value)
    where = f"{option} {text}" if option else text
    p = Path(text).expanduser()
    if not text.strip():
        raise DataNotFoundError(f"{option or 'the corpus'}: empty; give {_accepted(accept)}")
    if not p.exists():
        near = _near_names(p)
        hint = f" (did you mean {' or '.join(near)}?)" if near else ""
        if "hub" in accept and looks_like_hub_id(text):
            if not hub_offline() or hub_cached(text):
                return DataSource("hub", text)
            offline = "the Hub is offline (HF_HUB_OFFLINE=1) and no copy of it is cached"
            if p.parent.is_dir():  # demo_out/hubb: a mistyped local folder, most likely
                raise DataNotFoundError(
                    f"{where}: no such folder{hint}; read as a Hub dataset id it cannot be "
                    f"loaded either: {offline}"
                )
            raise DataNotFoundError(
                f"{where}: no local folder of that name, and as a Hub dataset id it cannot be "
                f"loaded: {offline} (unset HF_HUB_OFFLINE and HF_DATASETS_OFFLINE to "
                "download it)"
            )
        raise DataNotFoundError(f"{where}: no such folder or file{hint}; give {_accepted(accept)}")
    kind = classify_folder(p)
    if kind in accept:
        return DataSource(kind, text, p)
    if kind == "gold":
        partner = _gold_partner(p)
        instead = f" ({partner} here)" if partner else ""
        raise DataSourceError(
            f"{where} is a gold folder (labels and keys: {', '.join(m for m in GOLD_MARKERS if (p / m).exists()) or p.name}"
            f"), not the dialogues: give the public Hub layout{instead}; the gold goes to --gold "
            "(leaderboard score, task3 score)"
        )
    if kind == "layout" and "gold" in accept:
        from .layout import default_gold_dir

        gold = default_gold_dir(p)
        instead = f" ({gold} here)" if gold.is_dir() else f" (export's --gold-dir, by default {gold})"
        raise DataSourceError(
            f"{where} is a public Hub layout, not a gold folder: give the gold folder{instead}"
        )
    if kind == "corpus" and "layout" in accept:
        raise DataSourceError(
            f"{where} is a generator output folder, not a Hub layout: export it first "
            f"(python -m dialfork_dataset export {text} DEST)"
        )
    if kind is None:
        raise DataSourceError(
            f"{where}: not a DialFork corpus (no data/ folder, no *.jsonl records, no gold "
            f"files); give {_accepted(accept)}"
        )
    raise DataSourceError(f"{where} is {_KIND_WORDS[kind]}; give {_accepted(accept)}")


__all__ = [
    "GOLD_MARKERS",
    "KINDS",
    "DataNotFoundError",
    "DataSource",
    "DataSourceError",
    "classify_folder",
    "hub_cached",
    "hub_offline",
    "looks_like_hub_id",
    "resolve_data",
]
