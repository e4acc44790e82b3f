"""The merge: finished shards become the per-task record files and ``manifest.json``.

:func:`merge_shards` copies the units, in plan order, into ``<task>.jsonl``, so the corpus is
byte-identical whether or not the run was interrupted and whatever the number of processes or
shards. Every record line is checked against the hash its unit's marker recorded at generation
time; one corrupt line anywhere and nothing is renamed into place. ``manifest.json`` is written
last: its presence means the corpus is complete.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dialfork_dataset.atomic import atomic_path, write_json_atomic

from ..errors import GenerationError
from .shards import RUN_FILE, SHARDS_DIR, read_shard, shard_path, verify_shard_block

logger = logging.getLogger("generation")

MANIFEST_FORMAT = "dialfork-generation-manifest/1"

#: Corrupt record lines listed in a refused merge's message (all are in the error's ``errors``).
MAX_CORRUPT_SHOWN = 50


@dataclass
class Manifest:
    """A finished corpus's ``manifest.json``: configuration, code version, files, counts, timings.

    ``manifest[key]`` reads a top-level key of :attr:`data` (``format``, ``config``, ``generator``,
    ``decoding``, ``code_version``, ``variants_version``, ``num_shards``, ``files``, ``counts``,
    ``timings``).

    Attributes:
        data: the manifest's parsed JSON.
        path: the ``manifest.json`` file.
    """

    data: dict[str, Any]
    path: Path

    @property
    def counts(self) -> dict[str, Any]:
        """The manifest's ``counts``: ``total``, ``per_task``, ``prefix_divergence``,
        ``forks_same_at_fork_turn`` and ``replay_fallbacks``. With ``check_conformance``, ``total``
        and each task also hold ``conformance``: ``checked``, ``flagged`` (D+ the check found not
        conformant), ``flagged_forks`` (their forks) and, per task, ``flagged_ids``."""
        return self.data["counts"]

    @property
    def files(self) -> list[Path]:
        """The corpus's record files (``<task>.jsonl`` beside the manifest), in manifest order."""
        return [self.path.parent / f for f in self.data["files"]]

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    @classmethod
    def load(cls, path: str | os.PathLike) -> Manifest:
        """Read a manifest.

        Args:
            path: a ``manifest.json`` file, or the corpus folder that holds one.

        Returns:
            The manifest.

        Raises:
            FileNotFoundError: the file does not exist.
            json.JSONDecodeError: the file is not JSON.
        """
        p = Path(path)
        if p.is_dir():
            p = p / "manifest.json"
        return cls(json.loads(p.read_text(encoding="utf-8")), p)


def _finished_units(out: Path, run: dict[str, Any]) -> dict[str, tuple[Path, dict[str, Any]]]:
    """``unit_id -> (shard file, marker)`` of every unit; raises naming the shards that still miss units."""
    n = run["num_shards"]
    done: dict[str, tuple[Path, dict[str, Any]]] = {}
    for i in range(n):
        p = shard_path(out, i, n)
        for uid, m in read_shard(p).items():
            done[uid] = (p, m)
    missing = [uid for uid, _ in run["units"] if uid not in done]
    if missing:
        miss = set(missing)
        shards = sorted({j % n for j, (uid, _) in enumerate(run["units"]) if uid in miss})
        raise GenerationError(
            f"{out}: {len(missing)} scenario(s) not generated yet (e.g. {missing[:3]}) in shard(s) "
            f"{shards}; rerun the generation (it resumes) before merging"
        )
    return done


def _corrupt_error(out: Path, corrupt: list[str]) -> GenerationError:
    bad = sorted({e.split(":", 1)[0] for e in corrupt})
    shown = corrupt[:MAX_CORRUPT_SHOWN] + (
        [f"... and {len(corrupt) - MAX_CORRUPT_SHOWN} more"] if len(corrupt) > MAX_CORRUPT_SHOWN else []
    )
    return GenerationError(
        f"{out}: {len(corrupt)} corrupt record line(s) in {len(bad)} shard(s); nothing was merged. "
        f"Regenerate the corrupt shard(s): remove {', '.join(bad)} and rerun the same generation "
        "command (it regenerates only the removed shards).\n" + "\n".join(shown),
        corrupt,
    )


def merge_shards(
    out_dir: str | os.PathLike, keep_shards: bool = False, wall_seconds: float | None = None
) -> Manifest:
    """Merge finished shards into ``<task>.jsonl`` files (canonical order) and write ``manifest.json``.

    Raises :class:`GenerationError` naming the shards that still miss units.

    Every task file is staged in a temporary file and renamed into place only when all shards
    verify; ``manifest.json`` is written last (atomically).

    Args:
        out_dir: the run's output folder (with ``shards/run.json`` and the shard files).
        keep_shards: keep ``shards/`` after the merge (default ``False``: removed).
        wall_seconds: the run's wall time to record in the manifest's ``timings``; ``None``
            (default) records ``null``.

    Returns:
        The written :class:`Manifest`; when there is no run file but ``manifest.json`` exists (an
            already merged corpus), that manifest.

    Raises:
        GenerationError: there is no run to merge (no run file and no manifest), a unit of the
            plan is missing from every shard (naming the shards to rerun), a shard marker is
            corrupt, or record lines are corrupt (hash mismatch, not JSON, invalid record;
            ``errors`` lists each line, and nothing is merged).
    """
    t0 = time.perf_counter()
    out = Path(out_dir)
    rpath = out / SHARDS_DIR / RUN_FILE
    if not rpath.is_file():
        if (out / "manifest.json").is_file():
            return Manifest.load(out)
        raise GenerationError(f"{out}: no run to merge ({rpath} missing)")
    run = json.loads(rpath.read_text(encoding="utf-8"))
    n = run["num_shards"]
    done = _finished_units(out, run)
    per_task: dict[str, dict[str, Any]] = {}
    by_task: dict[str, list[str]] = {}
    for uid, task in run["units"]:
        by_task.setdefault(task, []).append(uid)
    files = {}
    corrupt: list[str] = []  # every bad record line of every shard, reported together
    totals = {"scenarios": 0, "kept": 0, "dropped": 0, "conformant": 0, "forks": 0, "records": 0}
    pdiv_sum = same = fallbacks = 0
    gen_seconds = 0.0
    # Every task file is written to a temporary file that the ExitStack renames into place only when
    # the whole block succeeds: one corrupt shard (or any error) and no task file is replaced.
    with contextlib.ExitStack() as staged, contextlib.ExitStack() as handles:
        shard_files: dict[Path, Any] = {}
        for task in sorted(by_task):
            c = {
                "scenarios": 0,
                "kept": 0,
                "dropped": {},
                "conformant": 0,
                "forks": 0,
                "records": 0,
                "system_turns": {"min": None, "max": None, "mean": None},
            }
            ts = []
            fname = f"{task}.jsonl"
            h = hashlib.sha256()
            has_records = any(done[uid][1]["kept"] for uid in by_task[task])
            tmp = staged.enter_context(atomic_path(out / fname)) if has_records else None
            with open(tmp, "wb") if tmp is not None else contextlib.nullcontext() as fo:
                for uid in by_task[task]:
                    p, m = done[uid]
                    c["scenarios"] += 1
                    gen_seconds += m.get("seconds", 0.0)
                    if not m["kept"]:
                        reason = m["reason"].split(":")[0]
                        c["dropped"][reason] = c["dropped"].get(reason, 0) + 1
                        continue
                    fh = shard_files.get(p)
                    if fh is None:
                        fh = shard_files[p] = handles.enter_context(open(p, "rb"))
                    fh.seek(m["offset"])
                    block = fh.read(m["bytes"])
                    corrupt.extend(verify_shard_block(p, m, block))
                    fo.write(block)
                    h.update(block)
                    c["kept"] += 1
                    c["conformant"] += 1
                    c["forks"] += m["records"] - 1
                    c["records"] += m["records"]
                    ts.append(m["T"])
                    if m.get("conformant") is not None:  # checked (generation.conformance)
                        cc = c.setdefault(
                            "conformance", {"checked": 0, "flagged": 0, "flagged_forks": 0, "flagged_ids": []}
                        )
                        cc["checked"] += 1
                        if not m["conformant"]:
                            cc["flagged"] += 1
                            cc["flagged_forks"] += m["records"] - 1
                            cc["flagged_ids"].append(uid)
                    pdiv_sum += m.get("prefix_divergence", 0)
                    same += m.get("same_at_fork", 0)
                    fallbacks += m.get("replay_fallbacks", 0)
            if c["records"]:
                files[fname] = {"records": c["records"], "sha256": h.hexdigest()}
            if ts:
                c["system_turns"] = {"min": min(ts), "max": max(ts), "mean": round(sum(ts) / len(ts), 3)}
            per_task[task] = c
            for k in ("scenarios", "kept", "conformant", "forks", "records"):
                totals[k] += c[k]
            totals["dropped"] += sum(c["dropped"].values())
            if "conformance" in c:
                tc = totals.setdefault("conformance", {"checked": 0, "flagged": 0, "flagged_forks": 0})
                for k in tc:
                    tc[k] += c["conformance"][k]  # the ids stay per task
        if corrupt:
            raise _corrupt_error(out, corrupt)
    n_forks = totals["forks"]
    data = {
        "format": MANIFEST_FORMAT,
        "config": run["config"],
        "generator": run["generator"],
        "decoding": run["decoding"],
        "code_version": run["code_version"],
        "variants_version": run["variants_version"],
        "num_shards": n,
        "files": files,
        "counts": {
            "total": totals,
            "per_task": per_task,
            "prefix_divergence": {
                "total_turns": pdiv_sum,
                "mean_per_fork": round(pdiv_sum / n_forks, 4) if n_forks else 0.0,
            },
            "forks_same_at_fork_turn": same,
            "replay_fallbacks": fallbacks,
        },
        "timings": {
            "started": run.get("started"),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "generation_seconds": round(gen_seconds, 3),
            "merge_seconds": round(time.perf_counter() - t0, 3),
            "wall_seconds": round(wall_seconds, 3) if wall_seconds is not None else None,
        },
    }
    mpath = out / "manifest.json"
    write_json_atomic(mpath, data)
    if not keep_shards:
        shutil.rmtree(out / SHARDS_DIR, ignore_errors=True)
    logger.info(
        "%s: %d records (%d kept of %d scenarios, %d dropped) in %d file(s)",
        out,
        totals["records"],
        totals["kept"],
        totals["scenarios"],
        totals["dropped"],
        len(files),
    )
    return Manifest(data, mpath)


__all__ = ["MANIFEST_FORMAT", "Manifest", "merge_shards"]
