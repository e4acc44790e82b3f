"""Loading a corpus for the benchmark (generator folder, Hub layout folder or Hub id) and encoding it once."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .common import BenchError

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- corpus
class Corpus:
    """All records of a corpus plus its train/test partition by source.

    Args:
        records: The corpus's records (normalised DialFork record dicts), in canonical order.
        assignment: Conformant source id -> ``"train"`` or ``"test"`` (forks follow their source).
        origin: Where the corpus was read from (folder path or Hub id), for the report.
    """

    def __init__(self, records: list[dict[str, Any]], assignment: Mapping[str, str], origin: str):
        self.records = records
        self.assignment = dict(assignment)
        self.origin = origin
        self.by_id = {r["dialogue_id"]: r for r in records}

    @property
    def conformant(self) -> list[dict[str, Any]]:
        """The conformant records (``hallucination_type`` None), in corpus order."""
        return [r for r in self.records if r["hallucination_type"] is None]

    def split(self, name: str, forks: bool) -> list[dict[str, Any]]:
        """The records whose source is assigned to one split.

        Args:
            name: ``"train"`` or ``"test"``.
            forks: Include the forks of those sources (else only the conformant dialogues).

        Returns:
            The records, in corpus order.
        """
        return [
            r
            for r in self.records
            if self.assignment.get(r["source_id"]) == name and (forks or r["hallucination_type"] is None)
        ]

    def fingerprint(self) -> str:
        """A content hash of the corpus, independent of record order.

        Returns:
            The SHA-256 hex digest of every record's ``dialogue_id`` and ``turns``, by dialogue id.
        """
        h = hashlib.sha256()
        for r in sorted(self.records, key=lambda r: r["dialogue_id"]):
            h.update(json.dumps([r["dialogue_id"], r["turns"]], ensure_ascii=False, sort_keys=True).encode())
        return h.hexdigest()


def load_corpus(data: str | os.PathLike, skipped: list[str] | None = None) -> Corpus:
    """A generator output folder, an exported Hub layout folder, or a Hub dataset id.

    A layout missing a config is read from what is there, with a warning per missing part
    (appended to ``skipped``).

    Args:
        data: An existing folder without a ``data/`` subfolder (read as a generator output
            folder), a Hub layout folder (``data/<config>/<split>-*.parquet``), or a Hub dataset id.
        skipped: A list that receives one message per config/split that could not be loaded;
            None: the messages are only logged.

    Returns:
        The :class:`Corpus`: for a generator folder the records with the seeded source split
        (:func:`dialfork_dataset.builder.split_sources`); for a layout the records of the
        ``conformant`` and ``forked`` configs with the layout's own train/test split.

    Raises:
        BenchError: No config/split of the layout could be loaded.
        RecordError: A generator folder holds invalid records (every problem listed).
        FileNotFoundError: A generator folder path that holds no record file.
    """
    from dialfork_dataset.builder import load_records, split_sources
    from dialfork_dataset.records import normalize_record

    skipped = skipped if skipped is not None else []
    p = Path(data)
    if p.exists() and not (p / "data").is_dir():
        recs = load_records(p)
        return Corpus(recs, split_sources(recs), str(p))
    records: dict[str, dict[str, Any]] = {}
    assignment: dict[str, str] = {}
    found = False
    for cfg in ("conformant", "forked"):
        for split in ("train", "test"):
            try:
                rows = _load_config_split(data, cfg, split)
            except Exception as e:  # noqa: BLE001 - a missing config is reported, not fatal
                msg = f"config {cfg!r} split {split!r} of {data}: not loaded ({type(e).__name__}: {e})"
                logger.warning("skipped %s", msg)
                skipped.append(msg)
                continue
            found = True
            for r in rows:
                r = normalize_record(r)
                records[r["dialogue_id"]] = r
                if r["hallucination_type"] is None:
                    assignment[r["dialogue_id"]] = split
    if not found:
        raise BenchError(
            f"{data}: neither a generator output folder nor a DialFork layout with the "
            "'conformant'/'forked' configs"
        )
    from dialfork_dataset.builder import sort_key

    recs = sorted(records.values(), key=sort_key)
    return Corpus(recs, assignment, str(data))


def _load_config_split(data: Any, cfg: str, split: str) -> list[dict[str, Any]]:
    p = Path(data)
    if p.is_dir():
        files = sorted((p / "data" / cfg).glob(f"{split}-*.parquet"))
        if not files:
            raise FileNotFoundError(f"no data/{cfg}/{split}-*.parquet")
        import pyarrow.parquet as pq

        rows: list[dict[str, Any]] = []
        for f in files:
            rows.extend(pq.read_table(f).to_pylist())
        return rows
    from dialfork_dataset.hub import load_split

    return list(load_split(data, cfg, split=split))


# ----------------------------------------------------------------------------- encoders
def prepare_encoder(
    name: str,
    records: Sequence[Mapping[str, Any]],
    *,
    device: str | None = None,
    batch_size: int = 64,
    cache_dir: str | None = None,
    transcripts: bool = True,
    timings: dict[str, float] | None = None,
    progress: bool = True,
    runtime: str = "torch",
):
    """Load an encoder and encode every unique turn (and transcript) of ``records`` once.

    Args:
        name: Encoder alias or path (:func:`dialfork_metrics.encoders.get_encoder`).
        records: The records to encode.
        device: Torch device; None: chosen automatically.
        batch_size: Encoder batch size.
        cache_dir: Persistent embedding cache folder; None: memory only.
        transcripts: Also encode each dialogue's whole transcript (for the transcript-level methods).
        timings: A dict that receives the seconds spent under ``"encode:<name>"``; None: not recorded.
        progress: Show progress bars.
        runtime: Encoder runtime: ``"torch"``, ``"onnx"`` or ``"onnx-int8"``.

    Returns:
        The encoder (a new, unshared instance) whose cache holds every embedding of ``records``.
    """
    from ..encoders import get_encoder

    t0 = time.perf_counter()
    enc = get_encoder(
        name,
        shared=False,
        device=device,
        batch_size=batch_size,
        cache_dir=cache_dir,
        show_progress=None if progress else False,
        runtime=runtime,
    )
    enc.encode_dialogues(list(records))
    if transcripts:
        enc.encode_transcripts(list(records))
    if timings is not None:
        timings[f"encode:{name}"] = time.perf_counter() - t0
    return enc
