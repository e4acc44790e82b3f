"""Synthetic blind sets and gold in the exact published layout, for tests, benchmarks and demos.

:func:`synthetic_task3_test` draws task3-test-like rows (conformant sources and their 16
forks, fork turns from ``dialfork_dataset.fork_turns``); :func:`write_blind_and_gold` turns
them into ``dest/data/blind``, ``dest/data/blind_task2`` and a gold folder through
``dialfork_dataset.hub.make_blind`` (the lead's function that defines the blind ids, the
public/private split and the gold rows), writing the parquet shards with ``pyarrow`` (no
``datasets`` import, so fixtures stay fast). :func:`write_predictions` writes a detector
submission file from ``{dialogue_id: turn | None}``.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dialfork_dataset import taxonomy


def synthetic_task3_test(
    n_sources: int,
    seed: int = 0,
    tasks: Sequence[str] = ("weather", "bank_fraud_report"),
    max_T: int = 20,
    with_text: bool = True,
) -> list[dict[str, Any]]:
    """Rows shaped like ``task3`` test records: each source has one fork per registered type
    and position (16 for the paper's 4 types x 4 k).

    Args:
        n_sources: Number of source dialogues.
        seed: Seed of the ``random.Random`` that draws the turn counts.
        tasks: Tasks, given to the sources in turn.
        max_T: Most system turns of a source (at least 4); a fork has up to ``max_T + 4``.
        with_text: Fill ``turns`` with placeholder text (default True); False leaves them empty.

    Returns:
        Per source, its conformant row then its forks (by type, then k), with
        ``dialogue_id``, ``source_id``, ``task``, ``hallucination_type``, ``fork_position``,
        ``fork_turn``, ``num_system_turns`` and ``turns``.
    """
    from dialfork_dataset.forks import fork_turns

    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []

    def turns(T: int, tag: str) -> list[dict[str, str]]:
        if not with_text:
            return []
        out = []
        for t in range(1, T + 1):
            out.append({"speaker": "user", "text": f"user says {tag} {t}"})
            out.append({"speaker": "system", "text": f"system says {tag} {t}"})
        return out

    for s in range(n_sources):
        task = tasks[s % len(tasks)]
        T = rng.randint(4, max_T)
        sid = f"{task}-{1000 + s}"
        rows.append(
            {
                "dialogue_id": sid,
                "source_id": sid,
                "task": task,
                "hallucination_type": None,
                "fork_position": None,
                "fork_turn": None,
                "num_system_turns": T,
                "turns": turns(T, sid),
            }
        )
        for h in taxonomy.names():
            for k, tk in enumerate(fork_turns(T), 1):
                Tf = rng.randint(max(tk, 4), max_T + 4)
                fid = f"{sid}-{h}-k{k}"
                rows.append(
                    {
                        "dialogue_id": fid,
                        "source_id": sid,
                        "task": task,
                        "hallucination_type": h,
                        "fork_position": k,
                        "fork_turn": tk,
                        "num_system_turns": Tf,
                        "turns": turns(Tf, fid),
                    }
                )
    return rows


def to_records(rows: Sequence[Mapping[str, Any]], domain: str = "synthetic") -> list[dict[str, Any]]:
    """Full SPEC-4 records (``dialfork_dataset.records``) from :func:`synthetic_task3_test` rows, for
    end-to-end tests through ``dialfork_dataset.export_hub_layout``.

    Args:
        rows: Rows of :func:`synthetic_task3_test`.
        domain: The records' domain (default ``"synthetic"``).

    Returns:
        One record per row, with placeholder ``variant``, ``instruction`` and (for a type with
        a substitute task) ``substitute_task``; ``seed`` is the row index.
    """
    out = []
    for i, r in enumerate(rows):
        h = r["hallucination_type"]
        rec = {
            k: r[k]
            for k in (
                "dialogue_id",
                "source_id",
                "task",
                "hallucination_type",
                "fork_position",
                "fork_turn",
                "num_system_turns",
                "turns",
            )
        }
        rec.update(
            {
                "scenario_id": r["source_id"],
                "domain": domain,
                "seed": i,
                "generator": "template",
                "variant": f"{h.lower()}-1" if h else None,
                "instruction": f"synthetic {h} instruction" if h else None,
                "substitute_task": "other_task" if h and taxonomy.get(h).substitute else None,
            }
        )
        out.append(rec)
    return out


def _write_parquet(rows: list[Mapping[str, Any]], path: Path, schema) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([dict(r) for r in rows], schema=schema), path)


def write_blind_and_gold(
    task3_test: Sequence[Mapping[str, Any]],
    dest: str | os.PathLike,
    gold_dir: str | os.PathLike,
    *,
    key: bytes = b"k" * 32,
    public_fraction: float = 0.5,
) -> dict[str, Any]:
    """Write ``dest/data/blind``, ``dest/data/blind_task2`` and ``gold_dir`` like
    ``dialfork_dataset.export_hub_layout`` does (same ids, gold rows and manifest fields).

    Args:
        task3_test: Task 3 test rows (:func:`synthetic_task3_test`).
        dest: The layout folder to write.
        gold_dir: The gold folder to write (made if missing).
        key: The secret key of the blind ids (default 32 bytes of ``b"k"``).
        public_fraction: Share of sources in the public subset (default 0.5).

    Returns:
        ``{"blind", "pairs", "gold3", "gold2": the rows written, "manifest": the gold
        manifest}``.
    """
    import pyarrow as pa

    from dialfork_dataset.hub import make_blind
    from dialfork_dataset.jsonl import write_json_atomic, write_jsonl

    blind, pairs, gold3, gold2 = make_blind(list(task3_test), key, public_fraction)
    dest, gold_dir = Path(dest), Path(gold_dir)
    turn = pa.struct([("speaker", pa.string()), ("text", pa.string())])
    _write_parquet(
        blind,
        dest / "data" / "blind" / "test-00000-of-00001.parquet",
        pa.schema(
            [("dialogue_id", pa.string()), ("turns", pa.list_(turn)), ("num_system_turns", pa.int32())]
        ),
    )
    _write_parquet(
        pairs,
        dest / "data" / "blind_task2" / "test-00000-of-00001.parquet",
        pa.schema([("pair_id", pa.string()), ("reference_id", pa.string()), ("candidate_id", pa.string())]),
    )
    gold_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl(gold_dir / "task3_gold.jsonl", gold3)
    write_jsonl(gold_dir / "task2_gold.jsonl", gold2)
    digest = hashlib.sha256()
    for name in ("task3_gold.jsonl", "task2_gold.jsonl"):
        digest.update((gold_dir / name).read_bytes())
    manifest = {
        "revision": digest.hexdigest(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "public_fraction": public_fraction,
        "counts": {
            "task3": dict(Counter(g["subset"] for g in gold3)),
            "task2": dict(Counter(g["subset"] for g in gold2)),
        },
    }
    write_json_atomic(gold_dir / "gold_manifest.json", manifest)
    write_json_atomic(
        gold_dir / "blind_key.json", {"key": key.hex(), "note": "secret: keep with the gold only"}
    )
    return {"blind": blind, "pairs": pairs, "gold3": gold3, "gold2": gold2, "manifest": manifest}


def write_predictions(
    predictions: Mapping[str, int | None],
    path: str | os.PathLike,
    confidences: Mapping[str, float] | None = None,
) -> Path:
    """Write a detector-track submission (one ``{"dialogue_id", "prediction"}`` line per id).

    Args:
        predictions: ``{dialogue_id: predicted system turn, or None for no deviation}``.
        path: The JSON Lines file to write (atomically).
        confidences: Optional ``{dialogue_id: confidence}``; ids found there get a
            ``confidence`` field.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    from dialfork_dataset.jsonl import write_jsonl

    def rows():
        for did, p in predictions.items():
            r: dict[str, Any] = {"dialogue_id": did, "prediction": p}
            if confidences is not None and did in confidences:
                r["confidence"] = float(confidences[did])
            yield r

    path = Path(path)
    write_jsonl(path, rows())
    return path


def write_distances(distances: Mapping[str, float], path: str | os.PathLike) -> Path:
    """Write a metric-track submission (one ``{"pair_id", "distance"}`` line per pair).

    Args:
        distances: ``{pair_id: distance}`` (converted with ``float``).
        path: The JSON Lines file to write (atomically).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    from dialfork_dataset.jsonl import write_jsonl

    path = Path(path)
    write_jsonl(path, ({"pair_id": p, "distance": float(d)} for p, d in distances.items()))
    return path


def write_metadata(path: str | os.PathLike, **fields: Any) -> Path:
    """Write a metadata file; unspecified required fields get neutral defaults.

    Args:
        path: The metadata JSON file to write.
        **fields: Metadata fields (see ``leaderboard/schema/metadata.v1.json``), overriding the
            defaults (``method="example"``, ``regime="streaming"``,
            ``used_conformant_train=True``, ``open_source=True``,
            ``contact="someone@example.org"``, ``model_name`` / ``model_size`` / ``code_url``
            None). Nothing is validated here.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    md: dict[str, Any] = {
        "method": "example",
        "regime": "streaming",
        "used_conformant_train": True,
        "model_name": None,
        "model_size": None,
        "code_url": None,
        "open_source": True,
        "contact": "someone@example.org",
    }
    md.update(fields)
    path = Path(path)
    path.write_text(json.dumps(md, indent=2) + "\n", encoding="utf-8")
    return path


def make_fixture(root: str | os.PathLike, n_sources: int = 3, seed: int = 0, **kw: Any) -> dict[str, Any]:
    """``root/hub`` (blind layout) and ``root/hub-gold`` (gold) from :func:`synthetic_task3_test`;
    returns the paths, the task3 test rows and what :func:`write_blind_and_gold` returned.

    Args:
        root: The folder to write into.
        n_sources: Number of source dialogues (default 3).
        seed: Seed of the rows.
        **kw: Further arguments of :func:`synthetic_task3_test`.

    Returns:
        ``{"root", "blind_dir", "gold_dir", "rows"}`` plus the keys of
        :func:`write_blind_and_gold`.
    """
    root = Path(root)
    rows = synthetic_task3_test(n_sources, seed=seed, **kw)
    info = write_blind_and_gold(rows, root / "hub", root / "hub-gold")
    return {"root": root, "blind_dir": root / "hub", "gold_dir": root / "hub-gold", "rows": rows, **info}
