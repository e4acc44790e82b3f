"""The output folder: whether it can take this run (new, resume, complete, or refused) and the run file.

While a run is unfinished, ``out/shards/run.json`` holds its configuration and unit plan; a resume
with other settings, or into a folder that holds another configuration's records, is refused with
the setting that differs.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dialfork_dataset.atomic import write_json_atomic

from ..errors import GenerationError
from .config import GenerationConfig
from .shards import RUN_FILE, SHARDS_DIR
from .units import RunContext, Unit


def _same_source(a: Any, b: Any) -> bool:
    """Two recorded sources name the same one (paths as given, or absolute as older runs recorded
    them, compared resolved from the current folder)."""
    if a == b:
        return True
    from dialfork_dataset.sources import source_identity

    try:
        return isinstance(a, str) and isinstance(b, str) and source_identity(a) == source_identity(b)
    except ValueError:
        return False


def _diff_settings(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    return [
        f"{k}: existing {a.get(k)!r} vs requested {b.get(k)!r}"
        for k in sorted(set(a) | set(b))
        if not (_same_source(a.get(k), b.get(k)) if k == "star" else a.get(k) == b.get(k))
    ]


def _writable(folder: Path) -> bool:
    """Really try (root ignores permission bits, read-only mounts do not)."""
    if not os.access(folder, os.W_OK | os.X_OK):
        return False
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError:
        return False
    return True


def check_output_dir(out: Path, identity: Mapping[str, Any]) -> str:
    """Return ``"new"``, ``"resume"`` or ``"complete"``; raise if ``out`` is unusable or holds
    another configuration's records.

    Nothing is written (a temporary file is created and removed to test writability).

    Args:
        out: the output folder (may not exist yet).
        identity: the run's :meth:`GenerationConfig.identity`, compared with the ``config`` of an
            existing ``manifest.json`` or ``shards/run.json``.

    Returns:
        ``"new"`` (no folder, or one without a run's files), ``"resume"`` (an unfinished run of the
            same configuration) or ``"complete"`` (``manifest.json`` of the same configuration, no
            run file).

    Raises:
        GenerationError: ``out`` is not a folder, cannot be created or is not writable; its
            manifest or run file is unreadable; it holds records of a different configuration
            (``errors`` lists each differing setting); or it holds ``*.jsonl`` files without a
            manifest.
    """
    if out.exists() and not out.is_dir():
        raise GenerationError(f"output folder {out} exists and is not a folder")
    probe = out if out.exists() else next((p for p in out.parents if p.exists()), None)
    if probe is None or not probe.is_dir():
        raise GenerationError(
            f"output folder {out} cannot be created: {probe} is not a folder; choose another --out"
        )
    if not _writable(probe):
        raise GenerationError(f"output folder {out} is not writable (checked {probe}); choose another --out")
    if not out.exists():
        return "new"
    mpath = out / "manifest.json"
    rpath = out / SHARDS_DIR / RUN_FILE
    for p in (mpath, rpath):
        if p.is_file():
            try:
                existing = json.loads(p.read_text(encoding="utf-8"))["config"]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise GenerationError(f"{p} is unreadable ({e}); remove it or choose another --out") from None
            diffs = _diff_settings(existing, identity)
            if diffs:
                raise GenerationError(
                    f"output folder {out} holds records of a different configuration (refusing to mix them); "
                    f"differing setting(s): "
                    + "; ".join(diffs)
                    + ". Use another --out or the same settings.",
                    diffs,
                )
            if p is mpath and not rpath.is_file():
                return "complete"
            return "resume"
    stray = sorted(p.name for p in out.glob("*.jsonl*"))
    if stray:
        raise GenerationError(
            f"output folder {out} holds record files {stray[:5]} not written by a run of this "
            f"generator (no manifest.json); use an empty --out"
        )
    return "new"


def write_run_file(
    out: Path, config: GenerationConfig, units: Sequence[Unit], num_shards: int, ctx: RunContext
) -> None:
    """Write the run file of a new run; check an unfinished run's against this one (same plan, code, generator).

    Args:
        out: the output folder; the file is ``out/shards/run.json`` (written atomically).
        config: the run's configuration (its identity is recorded).
        units: the run's unit plan.
        num_shards: the number of shards of the run.
        ctx: the run's context (generator, decoding, code version, variant pool).

    Raises:
        GenerationError: an existing run file differs in the number of shards, the unit plan, the
            code version, the generator, the decoding or the variants version.
    """
    rpath = out / SHARDS_DIR / RUN_FILE
    data = {
        "config": config.identity(),
        "num_shards": num_shards,
        "generator": ctx.generator,
        "decoding": ctx.decoding,
        "code_version": ctx.code_version,
        "variants_version": ctx.pool.version,
        "variants_path": ctx.pool.path,
        "units": [[u.unit_id, u.task] for u in units],
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if rpath.is_file():
        old = json.loads(rpath.read_text(encoding="utf-8"))
        for k in ("num_shards", "units", "code_version", "generator", "decoding", "variants_version"):
            if old.get(k) != data[k]:
                what = "the scenario plan" if k == "units" else k
                raise GenerationError(
                    f"{out}: an unfinished run with a different {what} is in {rpath} (existing "
                    f"{_short(old.get(k))} vs requested {_short(data[k])}); finish it with the same settings or "
                    f"use another --out",
                    [k],
                )
        return
    write_json_atomic(rpath, data, indent=None)


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) < 80 else s[:77] + "..."


__all__ = ["check_output_dir", "write_run_file"]
