"""Settings of the streaming detectors: defaults, the ``paper`` and ``selected`` presets, and the
table of selected settings (``dialfork_metrics/task3/selected_settings.json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SPEAKERS: tuple[str, ...] = ("user", "system")
DEFAULT_ORDER = 6
DEFAULT_K = 64
DEFAULT_TAU = 0.05
DEFAULT_DISTANCE_THRESHOLD = 0.55
CALIBRATIONS: tuple[str, ...] = ("in_sample", "cross_fit")
#: how ``cross_fit`` gets the nodes of each fold (:meth:`StreamingDetector._cross_fit_p`)
CROSS_FIT_NODES: tuple[str, ...] = ("restrict", "recluster", "fixed")
SCOPES: tuple[str, ...] = ("task", "pooled")
PRESETS: tuple[str, ...] = ("selected", "paper")
#: the settings a preset (or the selection) fixes
SELECTABLE: tuple[str, ...] = (
    "calibration",
    "backoff",
    "distance_threshold",
    "scope",
    "order",
    "position_weight",
)
#: the paper's literal protocol (SPEC 8; Table 4 at N=6, Table 9 at N=3)
PAPER_SETTINGS: dict[str, Any] = {
    "calibration": "in_sample",
    "backoff": False,
    "distance_threshold": DEFAULT_DISTANCE_THRESHOLD,
    "scope": "task",
    "order": DEFAULT_ORDER,
    "position_weight": 0.0,
}
SELECTED_SETTINGS_FILE = Path(__file__).resolve().parent.parent / "selected_settings.json"


def preset_settings(
    preset: str = "selected", detector: str = "it", encoder: str | None = None
) -> dict[str, Any]:
    """The six :data:`SELECTABLE` settings of a preset for one detector and encoder.

    Args:
        preset: ``"paper"`` (the paper's literal protocol, :data:`PAPER_SETTINGS`) or
            ``"selected"`` (the settings chosen on train by ``benchmarks/bench_detectors.py``,
            stored in ``selected_settings.json``).
        detector: ``"it"``, ``"ss"``, ``"it+nc"`` or ``"ss+nc"``.
        encoder: The encoder's alias (e.g. ``"minilm"``); an encoder without its own entry, or
            ``None``, gets the file's ``"*"`` entry.

    Returns:
        ``{"calibration", "backoff", "distance_threshold", "scope", "order", "position_weight"}``: a
        new dict.

    Raises:
        ValueError: An unknown preset, or ``selected_settings.json`` has no (complete) entry for
            the detector.
    """
    if preset == "paper":
        return dict(PAPER_SETTINGS)
    if preset != "selected":
        raise ValueError(f"preset must be one of {PRESETS}, got {preset!r}")
    table = _selected_table()
    by_enc = table.get("encoders", {})
    key = encoder if encoder in by_enc else "*"
    entry = by_enc.get(key, {}).get(detector)
    if entry is None:
        raise ValueError(
            f"{SELECTED_SETTINGS_FILE}: no selected settings for detector {detector!r} (encoder {key!r})"
        )
    missing = [k for k in SELECTABLE if k not in entry]
    if missing:
        raise ValueError(f"{SELECTED_SETTINGS_FILE}: entry {key!r}/{detector!r} lacks {missing}")
    return {k: entry[k] for k in SELECTABLE}


_SELECTED: dict[str, Any] | None = None


def _selected_table() -> dict[str, Any]:
    global _SELECTED
    if _SELECTED is None:
        _SELECTED = json.loads(SELECTED_SETTINGS_FILE.read_text(encoding="utf-8"))
    return _SELECTED
