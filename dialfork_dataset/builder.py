"""From generator output (JSONL record files) to the ``conformant``/``forked``/``task3`` configs.

The corpus is partitioned by conformant *source*: per task, the conformant dialogues are put
in a deterministic pseudo-random order (keyed by ``split_seed`` and the source id, so the
split does not follow generation order) and the first ``floor(n/2)`` are ``train``, the rest
``test`` (SPEC section 4). Every config uses the same partition:

* ``conformant``: train / test = the two halves of the conformant dialogues;
* ``forked``: train / test = the forks of train / test sources;
* ``task3``: train = conformant train (for calibration); test = conformant test + their forks.

:class:`DialFork` is a ``datasets.GeneratorBasedBuilder`` over a folder of record files (datasets
5.x runs no loading scripts, so it is used from the package; the published corpus is the
parquet layout written by :func:`dialfork_dataset.hub.export_hub_layout`).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .citation import CITATION  # the one citation (re-exported here for the card and DatasetInfo)
from .jsonl import JsonlError, iter_jsonl
from .records import RecordError, dialogue_id_of, normalize_record, record_errors
from .taxonomy import is_type, type_index

logger = logging.getLogger(__name__)

CONFIGS: tuple[str, ...] = ("conformant", "forked", "task3")
SPLITS: tuple[str, ...] = ("train", "test")
DEFAULT_CONFIG = "task3"
DEFAULT_SPLIT_SEED = 0


def record_files(src: str | os.PathLike) -> list[Path]:
    """The record files of a generator output folder (``*.jsonl``, ``*.jsonl.gz``), sorted.

    ``src`` may also be a single record file.

    Files whose name starts with ``.`` and files under a ``shards`` folder are left out.

    Args:
        src: A generator output folder (searched recursively) or one record file.

    Returns:
        list[Path]: The record files, sorted; ``[src]`` for a file.

    Raises:
        FileNotFoundError: ``src`` does not exist, or the folder holds no record file.
    """
    src = Path(src)
    if src.is_file():
        return [src]
    if not src.is_dir():
        raise FileNotFoundError(f"{src}: no such record file or folder")
    files = sorted(
        p
        for p in src.rglob("*")
        if p.is_file()
        and (p.name.endswith(".jsonl") or p.name.endswith(".jsonl.gz"))
        and not p.name.startswith(".")
        and "shards" not in p.relative_to(src).parts[:-1]
    )
    if not files:
        raise FileNotFoundError(f"{src}: holds no *.jsonl record files (expected the generator's output)")
    return files


def sort_key(r: Mapping[str, Any]) -> tuple:
    """Canonical order: task, source, conformant first, then type (WIC, SSPC, GR, CSC), then k.

    Args:
        r: A record.

    Returns:
        tuple: A sort key ``(task, source_id, type rank (-1 for conformant), fork_position (0 when
        none), dialogue_id)``.
    """
    h = r.get("hallucination_type")
    return (
        r["task"],
        r["source_id"],
        -1 if h is None else (type_index(h) if is_type(h) else 99),
        r.get("fork_position") or 0,
        r["dialogue_id"],
    )


def load_records(
    src: str | os.PathLike | Sequence[Mapping[str, Any]], validate: bool = True
) -> list[dict[str, Any]]:
    """Read every record of a generator output folder (or take a list), validate, sort canonically.

    Args:
        src: A folder of ``*.jsonl`` record files, one such file, or a list of record mappings.
        validate: Check every record (SPEC section 4) and the cross-record rules.

    Returns:
        The records (every field present), sorted canonically (per source: the conformant
        dialogue first, then its forks by type and fork position).

    Raises:
        RecordError: Every problem of every file (``file:line: dialogue_id=...: field: reason``),
            plus cross-record checks (duplicate ids, forks whose source is missing, fork_turn/T
            mismatch with the source), in one error whose ``errors`` lists them all.
        FileNotFoundError: ``src`` does not exist.
    """
    errors: list[str] = []
    records: list[dict[str, Any]] = []
    where: dict[str, str] = {}
    if isinstance(src, (str, os.PathLike)):
        for path in record_files(src):
            try:
                for lineno, obj in iter_jsonl(path, collect=True):
                    loc = f"{path}:{lineno}"
                    if validate:
                        did = dialogue_id_of(obj)
                        errors.extend(f"{loc}: dialogue_id={did}: {e}" for e in record_errors(obj))
                    if isinstance(obj, Mapping):
                        rec = normalize_record(obj)
                        records.append(rec)
                        if isinstance(rec["dialogue_id"], str):
                            where.setdefault(rec["dialogue_id"], loc)
            except JsonlError as e:
                errors.extend(e.errors)
    else:
        for i, obj in enumerate(src, 1):
            loc = f"<records>[{i}]"
            if validate:
                errors.extend(f"{loc}: dialogue_id={dialogue_id_of(obj)}: {e}" for e in record_errors(obj))
            if not isinstance(obj, Mapping):
                if not validate:
                    raise RecordError(f"{loc}: expected a record (a mapping), got {type(obj).__name__}")
                continue
            rec = normalize_record(obj)
            records.append(rec)
            if isinstance(rec["dialogue_id"], str):
                where.setdefault(rec["dialogue_id"], loc)
    if validate and not errors:
        errors.extend(_cross_record_errors(records, where))
    RecordError.raise_if(
        errors, f"the records of {src if isinstance(src, (str, os.PathLike)) else 'the given list'}"
    )
    records.sort(key=sort_key)
    return records


def _cross_record_errors(records: Sequence[Mapping[str, Any]], where: Mapping[str, str]) -> list[str]:
    from .forks import MIN_SYSTEM_TURNS

    errs: list[str] = []
    seen: set[str] = set()
    sources: dict[str, Mapping[str, Any]] = {}
    units: dict[tuple[str, str, int], str] = {}
    for r in records:
        did = r["dialogue_id"]
        if did in seen:
            errs.append(f"{where.get(did, '?')}: dialogue_id={did!r}: duplicate id")
        seen.add(did)
        if r["hallucination_type"] is None:
            sources[did] = r
            if r["num_system_turns"] < MIN_SYSTEM_TURNS:  # SPEC 1: kept only if T >= 4
                errs.append(
                    f"{where.get(did, '?')}: dialogue_id={did!r}: a conformant dialogue needs "
                    f"T >= {MIN_SYSTEM_TURNS} system turns to admit four fork turns, has T="
                    f"{r['num_system_turns']} (drop it)"
                )
    for r in records:
        if r["hallucination_type"] is None:
            continue
        unit = (r["source_id"], r["hallucination_type"], r["fork_position"])
        first = units.setdefault(unit, r["dialogue_id"])
        if first != r["dialogue_id"]:
            errs.append(
                f"{where.get(r['dialogue_id'], '?')}: dialogue_id={r['dialogue_id']!r}: same source, type "
                f"and fork position as {first!r} ({unit[1]}, k={unit[2]} of {unit[0]!r}); keep one"
            )
        src = sources.get(r["source_id"])
        loc = where.get(r["dialogue_id"], "?")
        if src is None:
            errs.append(
                f"{loc}: dialogue_id={r['dialogue_id']!r}: source_id {r['source_id']!r} is not a conformant "
                "record of this corpus (add the source or drop the fork)"
            )
            continue
        from .forks import fork_turns

        try:
            expected = fork_turns(src["num_system_turns"])[r["fork_position"] - 1]
        except ValueError as e:
            errs.append(f"{loc}: dialogue_id={r['dialogue_id']!r}: source cannot be forked: {e}")
            continue
        if r["fork_turn"] != expected:
            errs.append(
                f"{loc}: dialogue_id={r['dialogue_id']!r}: fork_turn {r['fork_turn']} != t_{r['fork_position']}"
                f" = {expected} of its source (T={src['num_system_turns']})"
            )
        for k in ("task", "scenario_id", "domain"):
            if r[k] != src[k]:
                errs.append(
                    f"{loc}: dialogue_id={r['dialogue_id']!r}: {k} {r[k]!r} differs from its source's {src[k]!r}"
                )
    return errs


def _rank(split_seed: int, source_id: str) -> str:
    return hashlib.sha256(f"{split_seed}:{source_id}".encode()).hexdigest()


def split_sources(
    records: Iterable[Mapping[str, Any]], split_seed: int = DEFAULT_SPLIT_SEED
) -> dict[str, str]:
    """Assign each conformant source to train or test (SPEC section 4).

    Per task the conformant sources are ordered by a seeded hash of their id and the first
    floor(n/2) go to train; forks follow their source.

    Args:
        records: Records (only conformant ones are read).
        split_seed: Seed of the ordering hash.

    Returns:
        ``{source_id: "train" | "test"}``.
    """
    by_task: dict[str, list[str]] = defaultdict(list)
    for r in records:
        if r["hallucination_type"] is None:
            by_task[r["task"]].append(r["dialogue_id"])
    out: dict[str, str] = {}
    for _task, ids in sorted(by_task.items()):
        ordered = sorted(ids, key=lambda s: _rank(split_seed, s))
        n_train = len(ordered) // 2
        for i, sid in enumerate(ordered):
            out[sid] = "train" if i < n_train else "test"
    return out


def config_split_rows(
    records: Sequence[Mapping[str, Any]],
    config: str,
    split: str,
    split_seed: int = DEFAULT_SPLIT_SEED,
    assignment: Mapping[str, str] | None = None,
) -> list[Mapping[str, Any]]:
    """The rows of ``config``/``split`` in canonical order.

    ``conformant``: the conformant sources of the split; ``forked``: the forks of the split's
    sources; ``task3``: train holds the conformant sources only, test the conformant sources and
    their forks. Records keep the order of ``records`` (canonical when they come from
    :func:`load_records`); records whose source is not assigned are left out.

    Args:
        records: Every record (sources and forks).
        config: ``"conformant"``, ``"forked"`` or ``"task3"``.
        split: ``"train"`` or ``"test"``.
        split_seed: The seed of :func:`split_sources` (when ``assignment`` is None).
        assignment: A ready ``{source_id: "train" | "test"}``; None computes it from ``records``.

    Returns:
        list[Mapping[str, Any]]: The rows (the records themselves, not copies).

    Raises:
        ValueError: An unknown config or split.
    """
    if config not in CONFIGS:
        raise ValueError(f"unknown config {config!r}; DialFork has {', '.join(CONFIGS)}")
    if split not in SPLITS:
        raise ValueError(
            f"unknown split {split!r} for config {config!r}; expected one of {', '.join(SPLITS)}"
        )
    assignment = assignment if assignment is not None else split_sources(records, split_seed)
    rows = []
    for r in records:
        conf = r["hallucination_type"] is None
        side = assignment.get(r["source_id"])
        if side is None:
            continue
        if config == "conformant" and conf and side == split:
            rows.append(r)
        elif config == "forked" and not conf and side == split:
            rows.append(r)
        elif config == "task3" and side == split and (conf or split == "test"):
            rows.append(r)
    return rows


def all_config_rows(
    records: Sequence[Mapping[str, Any]], split_seed: int = DEFAULT_SPLIT_SEED
) -> dict[str, dict[str, list]]:
    """The rows of every public config and split (:func:`config_split_rows`, one assignment).

    Args:
        records: Every record (sources and forks).
        split_seed: The seed of the train/test split (:func:`split_sources`).

    Returns:
        dict[str, dict[str, list]]: Config (:data:`CONFIGS`) -> split (:data:`SPLITS`) -> rows.
    """
    assignment = split_sources(records, split_seed)
    return {c: {s: config_split_rows(records, c, s, assignment=assignment) for s in SPLITS} for c in CONFIGS}


def compound_config_rows(
    records: Sequence[Mapping[str, Any]],
    split_seed: int = DEFAULT_SPLIT_SEED,
    assignment: Mapping[str, str] | None = None,
) -> dict[str, list[Mapping[str, Any]]]:
    """The rows of the ``compound`` config (split -> rows, canonical order) of a compound corpus.

    Each split holds the compound forks (records with ``injections``) of its sources and those
    conformant sources, so every fork's ``source_id`` is a row of the same split. A source takes its
    side from ``assignment`` (the public configs' partition, so a source is on the same side in
    every config) and, when absent there, from :func:`split_sources` of ``records``.

    Args:
        records: The compound corpus (conformant sources and compound forks).
        split_seed: The seed of :func:`split_sources` of ``records``.
        assignment: The public configs' ``{source_id: side}``; None uses ``records``' own split.

    Returns:
        dict[str, list[Mapping[str, Any]]]: ``{"train": rows, "test": rows}``, canonical order;
        sources without a compound fork are left out.
    """
    side = dict(split_sources(records, split_seed))
    if assignment is not None:
        side.update({s: assignment[s] for s in side if s in assignment})
    with_forks = {r["source_id"] for r in records if r.get("injections")}
    out: dict[str, list[Mapping[str, Any]]] = {s: [] for s in SPLITS}
    for r in sorted(records, key=sort_key):
        split = side.get(r["source_id"])
        if split is None or r["source_id"] not in with_forks:
            continue
        if r["hallucination_type"] is None or r.get("injections"):
            out[split].append(r)
    return out


def _builder_classes():
    import datasets

    class DialForkConfig(datasets.BuilderConfig):
        """A DialFork config; ``split_seed`` fixes the deterministic train/test partition.

        Args:
            split_seed: The seed of the per-task train/test split.
            **kwargs: ``datasets.BuilderConfig``'s (``name``, ``version``, ``description``, ...).
        """

        def __init__(self, split_seed: int = DEFAULT_SPLIT_SEED, **kwargs):
            super().__init__(**kwargs)
            self.split_seed = split_seed

    class DialFork(datasets.GeneratorBasedBuilder):
        """DialFork from a folder of generator record files (``data_dir=``).

        Args:
            *args: ``datasets.GeneratorBasedBuilder``'s positional arguments.
            **kwargs: Its keyword arguments (``config_name``, ``data_dir``, ``cache_dir``, ...).
        """

        VERSION = datasets.Version("1.0.0")
        BUILDER_CONFIG_CLASS = DialForkConfig
        BUILDER_CONFIGS = [
            DialForkConfig(
                name="conformant",
                version=datasets.Version("1.0.0"),
                description="Conformant dialogues D+ (train/test halves per task).",
            ),
            DialForkConfig(
                name="forked",
                version=datasets.Version("1.0.0"),
                description="The forks of each conformant dialogue: one per (hallucination type, fork position).",
            ),
            DialForkConfig(
                name="task3",
                version=datasets.Version("1.0.0"),
                description="Task 3: train = conformant train half; test = conformant test half + its forks.",
            ),
        ]
        DEFAULT_CONFIG_NAME = DEFAULT_CONFIG

        def _info(self):
            from .records import record_features

            return datasets.DatasetInfo(
                description="DialFork: procedural hallucination in task-oriented dialogue (forks of STAR role-plays).",
                features=record_features(),
                homepage="https://github.com/idiap/dialfork",
                license="cc-by-4.0",
                citation=CITATION,
            )

        def _split_generators(self, dl_manager):
            data_dir = self.config.data_dir
            if not data_dir:
                raise ValueError("DialFork needs data_dir=<folder of generator *.jsonl record files>")
            records = load_records(data_dir)
            assignment = split_sources(records, self.config.split_seed)
            return [
                datasets.SplitGenerator(
                    name=getattr(datasets.Split, s.upper()),
                    gen_kwargs={
                        "rows": config_split_rows(records, self.config.name, s, assignment=assignment)
                    },
                )
                for s in SPLITS
            ]

        def _generate_examples(self, rows):
            from datasets.builder import Key

            for i, r in enumerate(rows):
                yield Key(0, i), dict(r)

    return DialForkConfig, DialFork


def __getattr__(name: str):  # lazy: datasets is heavy
    if name in ("DialFork", "DialForkConfig"):
        cfg, builder = _builder_classes()
        globals().update(DialFork=builder, DialForkConfig=cfg)
        return globals()[name]
    raise AttributeError(name)


def build_dataset(
    src: str | os.PathLike,
    config: str = DEFAULT_CONFIG,
    split_seed: int = DEFAULT_SPLIT_SEED,
    cache_dir: str | None = None,
):
    """Build a config from a folder of record files (the ``GeneratorBasedBuilder``).

    Args:
        src: A generator output folder.
        config: ``"conformant"``, ``"forked"``, ``"task3"`` (each with train/test), ``"blind"`` or
            ``"blind_task2"`` (see ``CONFIGS``).
        split_seed: Seed of the train/test split (``split_sources``).
        cache_dir: The ``datasets`` cache folder.

    Returns:
        A ``datasets.DatasetDict``.

    Raises:
        ValueError: An unknown config.
        RecordError: The records are invalid (every problem listed).
    """
    from . import builder as _self

    if config not in CONFIGS:
        raise ValueError(f"unknown config {config!r}; DialFork has {', '.join(CONFIGS)}")
    b = _self.DialFork(config_name=config, data_dir=str(src), split_seed=split_seed, cache_dir=cache_dir)
    b.download_and_prepare()
    return b.as_dataset()


__all__ = [
    "CONFIGS",
    "SPLITS",
    "DEFAULT_CONFIG",
    "build_dataset",
    "config_split_rows",
    "all_config_rows",
    "compound_config_rows",
    "load_records",
    "record_files",
    "sort_key",
    "split_sources",
]
