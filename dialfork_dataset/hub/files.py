"""Reading and writing a layout's files: parquet shards, the blind sets, the gold, ``load_dataset``
of a local layout (with a cache of its own), and the upload to the Hub."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..builder import DEFAULT_CONFIG, DEFAULT_SPLIT_SEED
from ..jsonl import read_jsonl
from .layout import BLIND_CONFIG, BLIND_PAIRS_CONFIG, GOLD_FILES, LAYOUT_CONFIGS


def write_parquet(
    rows: list[Mapping[str, Any]], features, path: Path, max_rows_per_shard: int
) -> tuple[list[str], int]:
    """Write ``rows`` as parquet shards ``<split>-XXXXX-of-YYYYY.parquet``; returns (names, arrow bytes).

    Args:
        rows: The rows (mappings matching ``features``); no rows writes one empty shard.
        features: The ``datasets.Features`` of the rows.
        path: The shard prefix: shards are written in ``path.parent`` (which must exist), named
            ``<path.name>-00000-of-0000N.parquet``.
        max_rows_per_shard: The most rows per shard (a positive integer).

    Returns:
        tuple[list[str], int]: The shard file names (not paths), in order, and the rows' total
        in-memory Arrow size in bytes (the card's ``num_bytes``).
    """
    import datasets

    n_shards = max(1, -(-len(rows) // max_rows_per_shard))
    names = []
    nbytes = 0
    for i in range(n_shards):
        part = rows[i * max_rows_per_shard : (i + 1) * max_rows_per_shard]
        name = f"{path.name}-{i:05d}-of-{n_shards:05d}.parquet"
        ds = (
            datasets.Dataset.from_list([dict(r) for r in part], features=features)
            if part
            else datasets.Dataset.from_dict({k: [] for k in features}, features=features)
        )
        nbytes += int(ds.data.nbytes)
        ds.to_parquet(str(path.parent / name))
        names.append(name)
    return names, nbytes


def read_parquet_rows(folder: str | os.PathLike, pattern: str = "*.parquet") -> list[dict[str, Any]]:
    """Every row of the parquet shards ``pattern`` in ``folder`` (a config's folder of a layout; e.g.
    ``pattern="test-*.parquet"`` for one split), in shard order, as dicts.

    Args:
        folder: The folder holding the shards (e.g. ``<layout>/data/forked``).
        pattern: A glob pattern of the shard file names; default every parquet file.

    Returns:
        list[dict[str, Any]]: Every row, shards in sorted file-name order.

    Raises:
        FileNotFoundError: No file in ``folder`` matches ``pattern``.
    """
    import pyarrow.parquet as pq

    folder = Path(folder)
    files = sorted(folder.glob(pattern))
    if not files:
        raise FileNotFoundError(
            f"{folder}: no parquet files (is this a DialFork Hub layout from export_hub_layout?)"
        )
    rows: list[dict[str, Any]] = []
    for f in files:
        rows.extend(pq.read_table(f).to_pylist())
    return rows


def load_blind(dest: str | os.PathLike) -> list[dict[str, Any]]:
    """Rows of the blind Task 3 set: ``{dialogue_id, turns, num_system_turns}``.

    Args:
        dest: A layout folder written by :func:`export_hub_layout`.

    Returns:
        list[dict[str, Any]]: The rows of ``dest/data/blind``, each ``{dialogue_id, turns,
        num_system_turns}`` (no labels).

    Raises:
        FileNotFoundError: ``dest/data/blind`` holds no parquet file.
    """
    return read_parquet_rows(Path(dest) / "data" / BLIND_CONFIG)


def load_blind_pairs(dest: str | os.PathLike) -> list[dict[str, Any]]:
    """Rows of the blind Task 2 pairs: ``{pair_id, reference_id, candidate_id, reference, candidate}``
    (the two transcripts inline; layouts older than the hidden split have the ids only).

    Args:
        dest: A layout folder written by :func:`export_hub_layout`.

    Returns:
        list[dict[str, Any]]: The rows of ``dest/data/blind_task2`` (no labels).

    Raises:
        FileNotFoundError: ``dest/data/blind_task2`` holds no parquet file.
    """
    return read_parquet_rows(Path(dest) / "data" / BLIND_PAIRS_CONFIG)


def load_gold(gold_dir: str | os.PathLike) -> dict[str, Any]:
    """The labels of the blind sets (for the scorer only).

    Args:
        gold_dir: The gold folder written by :func:`export_hub_layout` (default name
            ``<dest>-gold``).

    Returns:
        dict[str, Any]: ``{"task3": rows of task3_gold.jsonl, "task2": rows of task2_gold.jsonl,
        "manifest": the parsed gold_manifest.json}``; task3 rows are ``{dialogue_id,
        num_system_turns, hallucination_type, fork_position, fork_turn, task, subset}``, task2 rows
        ``{pair_id, unit_id, hallucination_type, fork_position, task, subset}``.

    Raises:
        FileNotFoundError: ``task3_gold.jsonl``, ``task2_gold.jsonl`` or ``gold_manifest.json`` is
            missing from ``gold_dir``.
    """
    gold_dir = Path(gold_dir)
    missing = [n for n in GOLD_FILES[:3] if not (gold_dir / n).exists()]
    if missing:
        raise FileNotFoundError(f"{gold_dir}: not a DialFork gold folder (missing {', '.join(missing)})")
    return {
        "task3": read_jsonl(gold_dir / "task3_gold.jsonl"),
        "task2": read_jsonl(gold_dir / "task2_gold.jsonl"),
        "manifest": json.loads((gold_dir / "gold_manifest.json").read_text(encoding="utf-8")),
    }


def push_to_hub(
    dest: str | os.PathLike,
    repo_id: str,
    *,
    token: str | None = None,
    private: bool = False,
    revision: str | None = None,
    commit_message: str = "Upload DialFork",
    api: Any = None,
    endpoint: str | None = None,
) -> Any:
    """Upload a layout written by :func:`export_hub_layout` as a Hub dataset repo.

    Refuses a folder that holds gold files (labels must never be published). ``api`` may be an
    ``huggingface_hub.HfApi`` (or a test double); ``endpoint`` selects a non-default Hub.

    Only ``README.md`` and ``data/**`` are uploaded; the repo is created if it does not exist.

    Args:
        dest: The layout folder (must hold ``README.md`` and ``data/``).
        repo_id: The Hub dataset repo, ``"owner/name"``.
        token: A Hub token; None uses the stored login. Ignored when ``api`` is given.
        private: Create the repo as private (only when it does not exist yet).
        revision: The branch to upload to; None is the default branch.
        commit_message: The commit message of the upload.
        api: An ``huggingface_hub.HfApi``-like object (``create_repo``, ``upload_folder``); None
            builds ``HfApi(endpoint=endpoint, token=token)``.
        endpoint: The Hub URL; None is the default (``huggingface.co`` or ``HF_ENDPOINT``).
            Ignored when ``api`` is given.

    Returns:
        Any: What ``api.upload_folder`` returns (a ``huggingface_hub.CommitInfo`` for ``HfApi``).

    Raises:
        FileNotFoundError: ``dest`` lacks ``README.md`` or ``data/``.
        ValueError: ``dest`` holds a gold file (any of ``GOLD_FILES``, at any depth).
    """
    dest = Path(dest)
    if not (dest / "README.md").exists() or not (dest / "data").is_dir():
        raise FileNotFoundError(
            f"{dest}: not a DialFork Hub layout (README.md and data/ expected); run export first"
        )
    leaked = [str(p.relative_to(dest)) for p in dest.rglob("*") if p.name in GOLD_FILES]
    if leaked:
        raise ValueError(f"{dest} holds gold files {leaked}: remove them; gold must never be published")
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi(endpoint=endpoint, token=token)
    api.create_repo(repo_id=repo_id, repo_type="dataset", private=private, exist_ok=True)
    return api.upload_folder(
        folder_path=str(dest),
        repo_id=repo_id,
        repo_type="dataset",
        revision=revision,
        commit_message=commit_message,
        allow_patterns=["README.md", "data/**"],
    )


def local_layout_cache_dir(folder: str | os.PathLike) -> str:
    """The ``datasets`` cache folder for one local Hub-layout folder, keyed by its content.

    ``load_dataset(folder, config)`` caches a config that the card's YAML names under the folder's
    base name and the config name only: two different folders both called ``hub`` (two exports,
    two test runs) share one cache entry, and the second silently reads the first one's rows.
    Keying the cache by the resolved path and every data file's size and modification time
    (``mtime_ns``) gives each export its own entry, reused while the files do not change.

    Args:
        folder: The local layout folder.

    Returns:
        str: ``<HF_DATASETS_CACHE>/dialfork-local/<24 hex digits>`` (not created here).
    """
    import datasets.config

    root = Path(folder).resolve()
    h = hashlib.sha256(str(root).encode())
    for f in sorted([root / "README.md", *(root / "data").rglob("*")]):
        if f.is_file():
            st = f.stat()
            h.update(f"\0{f.relative_to(root).as_posix()}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return str(Path(datasets.config.HF_DATASETS_CACHE) / "dialfork-local" / h.hexdigest()[:24])


def load_layout(folder: str | os.PathLike, config: str, split: str | None = None):
    """``load_dataset(folder, config, split=split)`` for a local Hub-layout folder, with a cache of
    its own (:func:`local_layout_cache_dir`), so that another folder's rows are never read.

    Args:
        folder: The local layout folder (written by :func:`export_hub_layout`).
        config: A config of the layout, e.g. ``"forked"``, ``"task3"``, ``"blind"``.
        split: ``"train"`` / ``"test"``; None loads every split.

    Returns:
        datasets.Dataset | datasets.DatasetDict: The split's ``Dataset`` when ``split`` is given,
        else a ``DatasetDict`` of every split.
    """
    from datasets import load_dataset

    return load_dataset(str(folder), config, split=split, cache_dir=local_layout_cache_dir(folder))


def load_split(
    data: str | os.PathLike,
    config: str = DEFAULT_CONFIG,
    split: str | None = None,
    split_seed: int = DEFAULT_SPLIT_SEED,
):
    """Load a config from a Hub id, a Hub-layout folder, or a generator output folder.

    Returns a ``datasets.Dataset`` (``split`` given) or ``DatasetDict``.

    Args:
        data: A Hub dataset id (e.g. ``"idiap/dialfork"``), a Hub-layout folder (it has ``data/``)
            or a generator output folder (built on the fly with
            :func:`~dialfork_dataset.builder.build_dataset`).
        config: The config; default ``"task3"``. A generator output folder has ``conformant``,
            ``forked`` and ``task3``; a layout or Hub id also the layout configs (``compound``,
            ``blind``, ``blind_task2``).
        split: ``"train"`` / ``"test"``; None loads every split.
        split_seed: The seed of the train/test split of a generator output folder (ignored for a
            layout or Hub id, whose split is fixed); default 0.

    Returns:
        datasets.Dataset | datasets.DatasetDict: The split's ``Dataset`` when ``split`` is given,
        else a ``DatasetDict``.

    Raises:
        ValueError: ``config`` is not a DialFork config (for a generator output folder: not one of
            ``conformant``, ``forked``, ``task3``).
        DataSourceError: ``data`` is none of the three (a gold folder, a folder of something
            else), or loading it from the Hub failed (:func:`~dialfork_dataset.hub.resolve.resolve_data`).
        DataNotFoundError: No such folder, and as a Hub id it cannot be loaded (offline, not cached).
    """
    from .resolve import DataSourceError, resolve_data

    src = resolve_data(data)
    if src.kind == "corpus":
        from ..builder import build_dataset

        dd = build_dataset(src.path, config, split_seed=split_seed)
        return dd[split] if split else dd
    if config not in LAYOUT_CONFIGS:
        raise ValueError(f"unknown config {config!r}; DialFork has {', '.join(LAYOUT_CONFIGS)}")
    if src.kind == "layout":
        return load_layout(src.path, config, split=split)
    from datasets import load_dataset

    try:
        return load_dataset(str(data), config, split=split)
    except (ValueError, FileNotFoundError):
        raise
    except Exception as e:  # noqa: BLE001 - the Hub client's errors (offline, unknown repo) are many
        raise DataSourceError(
            f"{data}: no such local folder, and loading it as a Hub dataset id failed "
            f"({type(e).__name__}: {e})"
        ) from e
