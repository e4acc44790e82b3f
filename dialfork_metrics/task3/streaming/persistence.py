"""Saving and loading a fitted streaming detector: ``config.json`` + ``arrays.npz`` per model (JSON and
npz, no pickle), one sub-folder per task model. Mixed into :class:`~.detector.StreamingDetector`, which
this module does not import (:meth:`load` returns an instance of the class it is called on)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..baselines.ngram import NgramLM
from ._common import _encoder_name
from .decision import DEFAULT_CONFIDENCE
from .presets import SELECTABLE

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11

FORMAT = "dialfork-task3-streaming-detector"
FORMAT_VERSION = 2


class PersistenceMixin:
    """``settings``/``config``/``save``/``load`` of :class:`~.detector.StreamingDetector`."""

    def _running(self) -> tuple[dict[str, Any], dict[str, str]]:
        """The resolved settings (and their sources): the fitted ones, else those the parameters give."""
        if "order_" in self.__dict__:
            return (
                {k: getattr(self, k + "_") for k in (*SELECTABLE, "threshold_rule")},
                dict(self.settings_source_),
            )
        return self.resolved_settings()

    def settings(self) -> dict[str, Any]:
        """The six :data:`SELECTABLE` settings this detector runs with: the fitted ones
        (``order_``, ...), or before :meth:`fit` those its parameters resolve to.

        Returns:
            dict[str, Any]: setting -> value (presets resolved).

        Raises:
            ValueError: Not fitted, and the parameters are invalid.
        """
        settings = self._running()[0]
        return {k: settings[k] for k in SELECTABLE}

    def config(self) -> dict[str, Any]:
        """The detector's settings as saved in ``config.json``.

        Returns:
            dict[str, Any]: the registry name, every constructor setting (presets resolved, as
            :meth:`settings`), where each selectable setting came from (``settings_source``) and
            the encoder's name.

        Raises:
            ValueError: Not fitted, and the parameters are invalid.
        """
        run, source = self._running()
        return {
            "detector": self.name,
            "method": self.method,
            "node_confidence": bool(self.node_confidence),
            "order": run["order"],
            "position_weight": run["position_weight"],
            "K": self.K,
            "tau": float(self.tau),
            "distance_threshold": run["distance_threshold"],
            "false_alarm_rate": float(self.false_alarm_rate),
            "percentile_method": self.percentile_method,
            "threshold_rule": run["threshold_rule"],
            "confidence": float(self.confidence),
            "cross_fit_nodes": self.cross_fit_nodes,
            "backoff": run["backoff"],
            "calibration": run["calibration"],
            "calibration_folds": self.calibration_folds,
            "calibration_seed": int(self.calibration_seed),
            "scope": run["scope"],
            "preset": self.preset,
            "settings_source": source,
            # the name it was built with (an alias stays an alias, not the resolved path)
            "encoder": _encoder_name(self.encoder),
        }

    def save(self, path: str | os.PathLike) -> Path:
        """Write ``config.json`` + ``arrays.npz`` into folder ``path`` (atomic per file); with one
        model per task, each task's model goes to ``path/tasks/<i>/`` and ``config.json`` lists them.

        Args:
            path: The folder (created if missing).

        Returns:
            The folder's path.

        Raises:
            NotFittedError: The detector is not fitted.
        """
        from dialfork_dataset.jsonl import write_json_atomic

        self.check_is_fitted()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        meta: dict[str, Any] = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            **self.config(),
            "tasks": self.tasks_,
            "n_train": self.n_train_,
            "train_false_alarm_rate": self.train_false_alarm_rate_,
        }
        if self.task_models_:
            entries = []
            for i, (task, m) in enumerate(sorted(self.task_models_.items(), key=lambda kv: str(kv[0]))):
                m._save_model(path / "tasks" / f"{i:03d}")
                entries.append({"task": task, "folder": f"tasks/{i:03d}"})
            meta["task_models"] = entries
        else:
            meta.update(self._save_model(path))
        write_json_atomic(path / "config.json", meta)
        return path

    def _save_model(self, path: Path) -> dict[str, Any]:
        """Write one model's arrays (and, for a task model, its own ``config.json``); returns its metadata."""
        from dialfork_dataset.jsonl import write_json_atomic

        path.mkdir(parents=True, exist_ok=True)
        arrays = {f"centroids_{sp}": c.astype(np.float64) for sp, c in self.centroids_.items()}
        arrays.update(self.lm_.to_arrays())
        arrays["calibration_stats"] = np.asarray(self.calibration_stats_, dtype=np.float64)
        tmp = path / ".arrays.tmp.npz"
        np.savez_compressed(tmp, **arrays)
        os.replace(tmp, path / "arrays.npz")
        meta = {
            "speakers": list(self.centroids_),
            "node_offsets": self.node_offsets_,
            "vocab_size": self.vocab_size,
            "threshold": self.threshold_,
            "n_train": self.n_train_,
            "train_false_alarm_rate": self.train_false_alarm_rate_,
        }
        if self._parent is not None:
            write_json_atomic(
                path / "config.json", {"format": FORMAT + "-task-model", "tasks": self.tasks_, **meta}
            )
        return meta

    def _load_model(self, path: Path, meta: Mapping[str, Any]) -> None:
        with np.load(path / "arrays.npz", allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        self.centroids_ = {sp: arrays[f"centroids_{sp}"] for sp in meta["speakers"]}
        self.node_offsets_ = {sp: int(o) for sp, o in meta["node_offsets"].items()}
        self.lm_ = NgramLM.from_arrays(self.order_, int(meta["vocab_size"]), arrays, backoff=self.backoff_)
        self.calibration_stats_ = arrays["calibration_stats"]
        self.threshold_ = float(meta["threshold"])
        self.n_train_ = int(meta["n_train"])
        self.train_false_alarm_rate_ = meta.get("train_false_alarm_rate")

    @classmethod
    def load(cls, path: str | os.PathLike, encoder: Any = None) -> Self:
        """Load a detector saved by :meth:`save`. Folders written before scopes and presets existed
        (format version 1) load as the single pooled model they hold, with its saved settings.

        Args:
            path: The folder holding ``config.json``.
            encoder: Overrides the saved encoder name (alias, path or object); None: the saved one.

        Returns:
            The fitted detector.

        Raises:
            FileNotFoundError: The folder has no ``config.json``.
            ValueError: ``config.json`` is not a streaming detector's, or its format version is newer
                than this code.
        """
        path = Path(path)
        cfg_path = path / "config.json"
        if not cfg_path.is_file():
            raise FileNotFoundError(f"{path}: no config.json (not a saved Task 3 detector folder)")
        meta = json.loads(cfg_path.read_text(encoding="utf-8"))
        if meta.get("format") != FORMAT:
            raise ValueError(f"{cfg_path}: not a streaming detector (format {meta.get('format')!r})")
        if meta.get("format_version", 0) > FORMAT_VERSION:
            raise ValueError(
                f"{cfg_path}: format version {meta['format_version']} is newer than this code "
                f"({FORMAT_VERSION}); upgrade dialfork"
            )
        det = cls(
            method=meta["method"],
            node_confidence=meta["node_confidence"],
            order=meta["order"],
            K=meta["K"],
            tau=meta["tau"],
            distance_threshold=meta["distance_threshold"],
            false_alarm_rate=meta["false_alarm_rate"],
            percentile_method=meta["percentile_method"],
            backoff=meta["backoff"],
            calibration=meta.get("calibration", "in_sample"),
            calibration_folds=meta.get("calibration_folds", 5),
            calibration_seed=meta.get("calibration_seed", 0),
            encoder=encoder if encoder is not None else meta.get("encoder"),
            scope=meta.get("scope", "pooled"),
            preset=meta.get("preset", "selected"),
            threshold_rule=meta.get("threshold_rule", "percentile"),
            confidence=meta.get("confidence", DEFAULT_CONFIDENCE),
            cross_fit_nodes=meta.get("cross_fit_nodes", "fixed"),
            # saved before the position weight existed: the single threshold they ran with
            position_weight=meta.get("position_weight", 0.0),
        )._resolve_params()
        if "settings_source" in meta:
            det.settings_source_ = dict(meta["settings_source"])
        det.tasks_ = list(meta.get("tasks", [None]))
        det.task_models_ = {}
        if meta.get("task_models"):
            det.centroids_, det.node_offsets_, det.lm_, det.threshold_, det.calibration_stats_ = (
                {},
                {},
                None,
                None,
                None,
            )
            for entry in meta["task_models"]:
                sub = det._submodel()
                sub_path = path / entry["folder"]
                sub_meta = json.loads((sub_path / "config.json").read_text(encoding="utf-8"))
                sub._load_model(sub_path, sub_meta)
                sub.tasks_ = [entry["task"]]
                det.task_models_[entry["task"]] = sub
            det.n_train_ = int(meta["n_train"])
            det.train_false_alarm_rate_ = meta.get("train_false_alarm_rate")
        else:
            det._load_model(path, meta)
        return det
