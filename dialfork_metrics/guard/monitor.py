"""The in-process guardrail (SPEC section 10): a fitted streaming Task 3 detector watching one live
conversation turn by turn.

A :class:`Monitor` wraps a fitted :class:`~dialfork_metrics.task3.streaming.StreamingDetector` (its
nodes, N-gram LM, node confidence and threshold) and its encoder. A :class:`Session` carries one
conversation: each observed turn is encoded once, mapped to its node, and advanced with the
detector's own per-turn step (:meth:`StreamingDetector.step`, the rule every Task 3 streaming
prediction uses), so the first alarm is the detector's Task 3 prediction by construction. The
carried state is the last ``N-1`` nodes, ``p_{t-1}`` and three counters: a turn costs the same at
turn 2 or 400, and :meth:`Session.state` is a small JSON object that restores the session exactly.

Verdict semantics. ``alarm`` is sticky: once a turn raises the first alarm, every later verdict has
``alarm=True`` and the same ``first_alarm``. ``first_alarm`` is a system turn index, as in Task 3:
an alarm raised by a user turn names the latest system turn before it (system turn 1 if none;
SPEC section 8), which has already been answered. ``raised`` says whether this turn itself crossed
the threshold.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import tempfile
import threading
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .fitting import _check_guardable, _is_workflow
from .offtask import alarm_reason, off_task_warning  # off_task_warning re-exported: the monitor's warning

logger = logging.getLogger(__name__)

FORMAT = "dialfork-guard-monitor"
FORMAT_VERSION = 1
STATE_FORMAT = "dialfork-guard-session"
STATE_VERSION = 1
SPEAKERS = ("user", "system")
#: The encoder's memory cache is cleared when it holds more texts than this (a live process sees
#: an unbounded stream of texts). Clearing never changes a verdict: a turn's embedding is its
#: single-text encoding either way.
DEFAULT_MAX_CACHE_TEXTS = 20_000
_ZIP_META = "monitor.json"
_ZIP_DETECTOR = "detector/"


class MonitorFileError(ValueError):
    """A monitor file that cannot be used (missing, not a monitor, unknown version, corrupt)."""


def _first_bad_member(z: zipfile.ZipFile) -> str | None:
    """What is wrong with the first member of ``z`` that does not read back (CRC, truncation), or None."""
    import zlib

    try:
        bad = z.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as e:
        return f"{type(e).__name__}: {e}"
    return None if bad is None else f"member {bad!r} does not match its checksum"


_REMAKE = "make it again with Monitor.fit(...).save(path) or 'python -m dialfork_metrics.guard fit'"


def _unreadable_zip(path: Path, e: Exception) -> MonitorFileError:
    """The error for a monitor file that ``zipfile`` cannot read: truncated or corrupt when it
    starts like a zip file (or is empty), otherwise not a monitor file at all."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError:
        head = b""
    if head == b"" or head.startswith(b"PK"):
        why = (
            "empty"
            if head == b""
            else "its zip directory is missing"
            if isinstance(e, zipfile.BadZipFile)
            else f"{type(e).__name__}: {e}"
        )
        return MonitorFileError(f"{path}: the monitor file is truncated or corrupt ({why}); {_REMAKE}")
    return MonitorFileError(f"{path}: not a DialFork monitor file (not a zip file); {_REMAKE}")


@dataclass(frozen=True)
class Verdict:
    """The guardrail's answer after one observed turn.

    Args:
        turn: 1-based index of the turn over all turns.
        system_turn: 1-based system turn index, or None on a user turn.
        alarm: The conversation has deviated as of this turn (sticky).
        first_alarm: System turn of the first alarm, or None.
        score: The detector statistic of this turn (None when undefined).
        threshold: The detector's calibrated threshold.
        speaker: ``"user"`` or ``"system"``.
        raised: This turn itself crossed the threshold.
        warning: Why the conversation does not look like the monitor's task, or None.
        rule: Workflow-aware monitors: why this turn deviates (set on every alarm raised), or None
            (see the attribute).
    """

    turn: int
    """1-based index of the turn over all turns (user and system)."""
    system_turn: int | None
    """1-based system turn index of this turn, or ``None`` on a user turn."""
    alarm: bool
    """The conversation has deviated as of this turn (sticky once raised)."""
    first_alarm: int | None
    """The system turn of the first alarm (the Task 3 prediction so far), or ``None``."""
    score: float | None
    """The detector statistic of this turn: IT ``p_t / j^gamma`` (alarm below the threshold), SS
    ``Delta_t + gamma log j`` (alarm above; ``None`` on the first turn, which has no jump), with
    ``gamma`` the detector's position weight and ``j`` the system turn (``gamma = 0``: ``p_t``,
    ``Delta_t``)."""
    threshold: float
    """The detector's calibrated threshold."""
    speaker: str = "system"
    """``"user"`` or ``"system"``."""
    raised: bool = False
    """This turn itself crossed the threshold (``alarm`` also covers earlier turns)."""
    warning: str | None = None
    """Set when the conversation does not look like the monitor's task (workflow-aware monitors:
    most system turns so far fit another task's workflow, or none)."""
    rule: dict[str, Any] | None = None
    """Workflow-aware monitors: why this system turn deviates. Set on every turn that raises an
    alarm, and on a turn that breaks a dialogue-state rule. ``rule``: ``skip-requires``,
    ``skip-closing`` or ``repeat-slot`` (the dialogue-state rules), ``off-task`` (a step of another
    task fits better), ``unfamiliar`` (it fits no step of any task), ``repeat`` or ``order``;
    ``node``: the step said (None: none); ``expected``: the step that should have come first;
    ``slot``: the slot missing or asked again; ``message``: one line, e.g. "outcome
    'weather_inform_forecast' before slot 'location' was collected (expected step
    'weather_ask_location')". None on other turns and for a node-stepped (IT/SS) monitor."""

    def to_dict(self) -> dict[str, Any]:
        """The verdict as a JSON-ready dict (one key per field; a non-finite ``score`` becomes None).

        Returns:
            The dict.
        """
        d = asdict(self)
        if d["score"] is not None and not math.isfinite(d["score"]):  # JSON has no inf
            d["score"] = None
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Verdict:
        """A verdict from :meth:`to_dict`'s output (unknown keys ignored).

        Args:
            d: The dict; needs every field without a default.

        Returns:
            The :class:`Verdict`.

        Raises:
            TypeError: A field without a default is missing.
        """
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def _check_speaker(speaker: Any, where: str) -> str:
    if speaker not in SPEAKERS:
        raise ValueError(f"{where}: speaker must be 'user' or 'system', got {speaker!r}")
    return speaker


def _check_text(text: Any, where: str) -> str:
    if not isinstance(text, str):
        raise ValueError(f"{where}: text must be a string, got {type(text).__name__}")
    if not text.strip():
        raise ValueError(f"{where}: text is empty")
    return text


#: The configuration that decides a verdict besides the fitted arrays and the threshold. Options that
#: act only at fit time (calibration, clustering threshold, ...) are reflected in those already, so
#: a monitor saved by one version keeps its fingerprint when a later version adds fit options.
FINGERPRINT_KEYS = ("method", "node_confidence", "order", "K", "tau", "backoff")
# ``position_weight`` also decides verdicts: detector_fingerprint hashes it when it is not 0


def detector_fingerprint(detector: Any) -> str:
    """SHA-256 over everything that decides a verdict: :data:`FINGERPRINT_KEYS`, the threshold, the
    node centroids and offsets, and the N-gram counts.

    Args:
        detector: A fitted :class:`~dialfork_metrics.task3.streaming.StreamingDetector` or
            :class:`~dialfork_metrics.task3.workflow.detector.WorkflowDetector` (its parameters,
            thresholds, node keys and arrays).

    Returns:
        The hex digest (64 characters).
    """
    h = hashlib.sha256()
    if _is_workflow(detector):
        h.update(b"wf")
        for k, v in sorted(detector.fingerprint_arrays().items()):
            h.update(k.encode())
            if isinstance(v, np.ndarray):
                h.update(np.ascontiguousarray(v).tobytes())
            else:
                h.update(json.dumps(v, sort_keys=True).encode())
        return h.hexdigest()
    cfg = detector.config()
    h.update(json.dumps({k: cfg.get(k) for k in FINGERPRINT_KEYS}, sort_keys=True).encode())
    if cfg.get("position_weight"):  # decides verdicts; hashed only when set, so older monitors keep theirs
        h.update(f"position_weight={float(cfg['position_weight'])!r}".encode())
    h.update(repr(float(detector.threshold_)).encode())
    h.update(json.dumps(detector.node_offsets_, sort_keys=True).encode())
    for sp in sorted(detector.centroids_):
        h.update(sp.encode())
        h.update(np.ascontiguousarray(detector.centroids_[sp], dtype=np.float64).tobytes())
    for k, a in sorted(detector.lm_.to_arrays().items()):
        h.update(k.encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


class Monitor:
    """A fitted streaming detector and its encoder, ready to watch conversations.

    Build one with :meth:`fit` or :meth:`load`; open a conversation with :meth:`session`.
    ``encoder`` (in :meth:`fit`/:meth:`load`) is an alias/path for
    :class:`dialfork_metrics.encoders.Encoder`, an encoder object, or ``None`` (then every
    :meth:`Session.observe` must pass ``embedding=``).

    Args:
        detector: A fitted :class:`~dialfork_metrics.task3.workflow.detector.WorkflowDetector`
            (``wf``, the default: it knows the workflow, so it also warns when a conversation looks
            like another task) or :class:`~dialfork_metrics.task3.streaming.StreamingDetector`.
        task: The task the monitor watches (saved with it); None: unknown (a workflow-aware
            detector fitted on one task gives it).
        max_cache_texts: Clear the encoder's memory cache when it holds more texts than this
            (never changes a verdict).

    Raises:
        TypeError: ``detector``'s registry entry has ``guard=False``, or it can be stepped neither
            the workflow-aware way nor the node way.
        ValueError: The detector is not fitted, or a workflow-aware one watches several tasks.
    """

    def __init__(
        self, detector: Any, *, task: str | None = None, max_cache_texts: int = DEFAULT_MAX_CACHE_TEXTS
    ):
        _check_guardable(detector)
        self._workflow_aware = _is_workflow(detector)
        if self._workflow_aware:
            detector.check_is_fitted()
            if task is None and len(detector.tasks) == 1:
                task = detector.tasks[0]
            if task not in detector.tasks:
                raise ValueError(
                    f"a workflow-aware monitor watches one fitted task; got task={task!r} for a "
                    f"detector fitted on {', '.join(detector.tasks)}"
                )
        else:
            detector.check_is_fitted()
        self.detector = detector
        self.task = task
        self.max_cache_texts = int(max_cache_texts)
        self.fingerprint = detector_fingerprint(detector)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        task = f", task={self.task!r}" if self.task else ""
        if self.workflow_aware:
            return f"Monitor('wf', threshold={self.threshold:.6g}{task})"
        return (
            f"Monitor({self.detector.name!r}, N={self.detector.order_}, V={self.detector.vocab_size}, "
            f"threshold={self.detector.threshold_:.6g}{task})"
        )

    @property
    def workflow_aware(self) -> bool:
        """Whether the detector is stepped the workflow-aware way (``wf``; else a node-stepped IT/SS one)."""
        return self._workflow_aware

    @property
    def threshold(self) -> float:
        """The alarm threshold of the watched task."""
        if self.workflow_aware:
            return float(self.detector.thresholds_[self.task])
        return float(self.detector.threshold_)

    @property
    def dim(self) -> int:
        """The embedding size the detector reads."""
        if self.workflow_aware:
            return self.detector.dim
        return int(next(iter(self.detector.centroids_.values())).shape[1])

    # -- fitting -------------------------------------------------------------------------------
    @classmethod
    def fit(
        cls,
        dialogues: Any = None,
        *,
        task: str | None = None,
        detector: str | None = None,
        encoder: Any = "minilm",
        order: int = 6,
        embeddings: Sequence[np.ndarray] | None = None,
        show_progress: bool = False,
        workflow: Any = None,
        **detector_options: Any,
    ) -> Monitor:
        """Fit ``detector`` (``"wf"``, the default, or ``"it"``, ``"ss"``, ``"it+nc"``, ``"ss+nc"``) on
        conformant dialogues, or ``wf`` on the workflow alone (no dialogues: ``task=`` and
        ``workflow=``). ``wf`` is fitted on every task of the records (the same detector as the
        Task 3 ``wf`` fit on the same data) and watches ``task``. ``detector_options`` go to the detector
        (:class:`~dialfork_metrics.task3.workflow.detector.WorkflowDetector`: ``false_alarm_rate``,
        ``min_similarity``...; :class:`StreamingDetector`: ``K``, ``tau``, ``distance_threshold``...);
        ``embeddings`` (one ``(n_turns, d)`` array per dialogue) skips the encoder at fit time.

        Args:
            dialogues: Conformant dialogues: a list of records or of turn lists, or a ``datasets``
                split; None or empty: ``wf`` from the workflow alone.
            task: The task to watch; None: the records' only task.
            detector: A registry entry with ``guard=True`` (``"wf"``, workflow-aware; ``"it"``,
                ``"ss"``, ``"it+nc"``, ``"ss+nc"``, or a registered one); None (default): ``"wf"``
                when a workflow is named (``workflow``, else ``$DIALFORK_STAR_DIR``). A named
                workflow that does not open or lacks the task raises (file, line, what is wrong);
                the workflow-free ``"ss+nc"`` is used only when no workflow was named (or the task
                is not in ``$DIALFORK_STAR_DIR``'s STAR copy), with a warning.
            encoder: Encoder alias/path or object; None: none (then ``embeddings`` are needed
                here and in every :meth:`Session.observe`).
            order: N of the N-gram LM (streaming IT/SS detectors only).
            embeddings: One ``(n_turns, d)`` array per dialogue, or None to encode them.
            show_progress: Show progress bars while fitting.
            workflow: ``wf`` only: the dialogues' workflow source (a StarCorpus, ``star:PATH``,
                ``workflow:FILE``); None: ``$DIALFORK_STAR_DIR``.
            **detector_options: Further options of the detector.

        Returns:
            The fitted :class:`Monitor` (``task`` read from the records when they carry it).

        Raises:
            ValueError: A named workflow cannot be opened or lacks the task (every problem at its
                ``file:line``), ``detector`` is not one the guard runs, a record is a fork, the
                dialogues belong to several tasks and ``task`` is not one of them (or the detector
                is workflow-free), no dialogues and no workflow task, or the detector rejects its
                options or the data.
            TypeError: ``dialogues`` is a single dialogue or record, or not a list of dialogues.
        """
        from ..task3 import registry as detector_registry
        from .fitting import as_dialogues, default_detector, fit_tasks, watched_task

        if isinstance(workflow, str | os.PathLike):
            # the saved detector reopens its source by this spec: absolute, so a monitor file loads from
            # any folder (workflow:car_service.yaml fitted in one folder, served from another)
            from dialfork_dataset.sources import parse_source_spec

            kind, where = parse_source_spec(workflow)
            workflow = f"{kind}:{where}"
        rows = as_dialogues(dialogues) if dialogues is not None else []
        forked = [
            str(r.get("dialogue_id", i))
            for i, r in enumerate(rows)
            if isinstance(r, Mapping) and r.get("hallucination_type") is not None
        ]
        if forked:
            raise ValueError(
                f"Monitor.fit() takes conformant dialogues; {len(forked)} record(s) are forks "
                f"(hallucination_type set), e.g. {', '.join(forked[:3])}: keep the records whose "
                "hallucination_type is None (a monitor fitted on forks learns to accept them)"
            )
        tasks = fit_tasks(rows)
        if detector is None:
            detector = default_detector(task or (tasks[0] if tasks else None), workflow, bool(rows))
        key = str(detector).strip().lower()
        guarded = detector_registry.names(guard=True)
        if key not in guarded:
            raise ValueError(f"the guard runs a streaming detector ({', '.join(guarded)}), got {detector!r}")
        spec = detector_registry.get(key)
        aware = "workflow" in spec.needs
        task = watched_task(tasks, task, aware)
        if aware:
            if task is None:
                raise ValueError(
                    "Monitor.fit(detector='wf') needs the task to watch: records with a 'task' field, "
                    "or task=NAME (with no dialogues: fitted on the workflow alone); detector='ss+nc' "
                    "for bare turn lists"
                )
        elif not rows:
            raise ValueError(
                f"Monitor.fit(detector={key!r}) learns from dialogues: give conformant dialogues"
            )
        # the detector gets what its registry entry needs, and order= if it is an N-gram one
        det = spec.build_from(
            {"encoder": encoder, "workflow": workflow},
            **({"order": order} if spec.ngram else {}),
            **detector_options,
        )
        det.fit(rows, embeddings=embeddings, show_progress=show_progress)
        enc = det.get_encoder()
        if enc is not None and hasattr(enc, "clear_cache"):
            # fit encoded the train turns in batches; a live turn is encoded alone. Start clean, so a
            # verdict depends only on the conversation's turns (and a loaded copy answers the same).
            enc.clear_cache()
        mon = cls(det, task=task)
        from dialfork_metrics.task3.fit_report import fit_report_lines, too_high

        shown = [mon.task] if mon.workflow_aware else None
        for line in fit_report_lines(det, shown):
            logger.log(logging.WARNING if too_high(det, shown) else logging.INFO, "Monitor.fit: %s", line)
        return mon

    # -- persistence ---------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Write one ``.zip`` file (``monitor.json`` + the detector's own files), atomically.

        Args:
            path: The file to write (its parent folders are created).

        Returns:
            ``path`` as a :class:`~pathlib.Path`.

        Raises:
            OSError: The file cannot be written (the temporary file is removed, ``path`` untouched).
        """
        from dialfork_dataset.jsonl import make_public

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "fingerprint": self.fingerprint,
            "task": self.task,
            "detector": self.detector.config(),
            "threshold": self.threshold,
            "vocab_size": getattr(self.detector, "vocab_size", None),
            "n_train": self.detector.n_train_,
        }
        with tempfile.TemporaryDirectory(prefix=".monitor.", dir=path.parent) as td:
            self.detector.save(Path(td) / "detector")
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            make_public(fd)
            try:
                with os.fdopen(fd, "wb") as fh:
                    with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_DEFLATED) as z:
                        z.writestr(_ZIP_META, json.dumps(meta, indent=2) + "\n")
                        for f in sorted((Path(td) / "detector").iterdir()):
                            z.write(f, _ZIP_DETECTOR + f.name)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, encoder: Any = None) -> Monitor:
        """Load a file written by :meth:`save` (no training data needed). ``encoder`` overrides the
        saved encoder name. Raises :class:`MonitorFileError` saying what is wrong with the file.

        Args:
            path: A file written by :meth:`save`.
            encoder: Encoder alias/path or object; None: the saved encoder name.

        Returns:
            The :class:`Monitor`, with the saved task.

        Raises:
            MonitorFileError: The file is missing, not a zip or not a monitor file, of an
                unsupported version, holds an unexpected member, a corrupt detector, or a
                fingerprint that does not match its contents.
        """
        from dialfork_metrics.task3.detectors import load_detector, saved_detector_spec

        path = Path(path)
        if not path.is_file():
            raise MonitorFileError(
                f"{path}: no such monitor file (make one with Monitor.fit(...).save(path) or "
                "'python -m dialfork_metrics.guard fit')"
            )
        try:
            z = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError, EOFError) as e:
            raise _unreadable_zip(path, e) from e
        with z, tempfile.TemporaryDirectory(prefix="dialfork-monitor-") as td:
            if (bad := _first_bad_member(z)) is not None:
                raise MonitorFileError(f"{path}: the monitor file is truncated or corrupt ({bad}); {_REMAKE}")
            names = set(z.namelist())
            if _ZIP_META not in names:
                raise MonitorFileError(f"{path}: not a DialFork monitor file (no {_ZIP_META})")
            try:
                meta = json.loads(z.read(_ZIP_META).decode("utf-8"))
            except (ValueError, UnicodeDecodeError) as e:
                raise MonitorFileError(f"{path}: {_ZIP_META} is not valid JSON ({e})") from e
            if not isinstance(meta, dict) or meta.get("format") != FORMAT:
                raise MonitorFileError(
                    f"{path}: not a DialFork monitor file (format "
                    f"{meta.get('format') if isinstance(meta, dict) else None!r})"
                )
            version = meta.get("format_version")
            if not isinstance(version, int) or version < 1 or version > FORMAT_VERSION:
                raise MonitorFileError(
                    f"{path}: monitor format version {version!r} is not supported by this "
                    f"dialfork (it reads versions 1..{FORMAT_VERSION}); "
                    + (
                        "upgrade dialfork"
                        if isinstance(version, int) and version > FORMAT_VERSION
                        else "refit the monitor"
                    )
                )
            det_dir = Path(td) / "detector"
            det_dir.mkdir()
            for name in names:
                if name.startswith(_ZIP_DETECTOR) and name != _ZIP_DETECTOR:
                    leaf = name[len(_ZIP_DETECTOR) :]
                    if "/" in leaf or "\\" in leaf or leaf.startswith(".") or not leaf:
                        raise MonitorFileError(f"{path}: unexpected member {name!r}")
                    (det_dir / leaf).write_bytes(z.read(name))
            try:
                # the registry entry whose save_format the detector folder names loads it (its loader)
                spec = saved_detector_spec(det_dir)
                if not spec.guard:
                    raise MonitorFileError(
                        f"{path}: the saved detector is a {spec.name!r}, whose registry entry has guard=False"
                    )
                det = load_detector(det_dir, encoder=encoder)
            except (OSError, ValueError, KeyError) as e:
                if isinstance(e, MonitorFileError):
                    raise
                raise MonitorFileError(f"{path}: corrupt detector ({type(e).__name__}: {e})") from e
        mon = cls(det, task=meta.get("task"))
        if meta.get("fingerprint") != mon.fingerprint:
            raise MonitorFileError(f"{path}: corrupt monitor (its fingerprint does not match its contents)")
        return mon

    # -- sessions, encoding ----------------------------------------------------------------------
    def session(self, state: Mapping[str, Any] | str | None = None) -> Session:
        """A new conversation, or the one saved by :meth:`Session.state` (a dict or its JSON).

        Args:
            state: None for a new conversation, or a state dict (or its JSON) of this monitor.

        Returns:
            The :class:`Session`.

        Raises:
            ValueError: The state is not valid JSON, not a session state of this version, belongs
                to another monitor, or has inconsistent fields (all listed).
        """
        return Session(self, state)

    def encode(self, text: str) -> np.ndarray:
        """The L2-normalised embedding of one turn, ``(d,)`` float64 (thread-safe).

        Args:
            text: The turn's text.

        Returns:
            The embedding, shape ``(d,)``, float64.

        Raises:
            ValueError: The monitor has no encoder.
        """
        return self.encode_many([text])[0]

    def encode_many(self, texts: Sequence[str]) -> np.ndarray:
        """:meth:`encode` of several turns under one lock, ``(n, d)`` float64 (thread-safe). Each text
        is encoded alone, as :meth:`encode` does (a padded batch could change the last bits of an
        embedding, and a verdict must not depend on which turns arrived together).

        Args:
            texts: The turns' texts.

        Returns:
            The embeddings, shape ``(len(texts), d)``, float64 (``(0, d)`` for no text).

        Raises:
            ValueError: The monitor has no encoder.
        """
        enc = self.detector.get_encoder()
        if enc is None:
            raise ValueError(
                "this monitor has no encoder: pass embedding= to observe(), or load it with "
                "Monitor.load(path, encoder='minilm')"
            )
        if not texts:
            return np.zeros((0, self.dim))
        with self._lock:
            e = np.stack([np.asarray(enc.encode([t])[0], dtype=np.float64) for t in texts])
            if hasattr(enc, "clear_cache") and len(enc) > self.max_cache_texts:
                enc.clear_cache()
        return e

    def assign(self, speaker: str, embedding: np.ndarray) -> tuple[int, float]:
        """(node id, node confidence) of one turn embedding spoken by ``speaker``.

        Args:
            speaker: ``"user"`` or ``"system"``.
            embedding: The turn's L2-normalised embedding, ``d`` values.

        Returns:
            ``(node, confidence)``: the detector's global node id (int) and the node confidence
            (float; 1.0 without node confidence).

        Raises:
            ValueError: The embedding's size differs from the detector's or it has NaN/inf.
            TypeError: The monitor's detector is workflow-aware (it has no node ids; a session
                observes turns with :meth:`Session.observe`).
        """
        if self.workflow_aware:
            raise TypeError("a workflow-aware monitor has no integer nodes: use session().observe(...)")
        e = np.asarray(embedding, dtype=np.float64).reshape(1, -1)
        dim = self.dim
        if e.shape[1] != dim or not np.all(np.isfinite(e)):
            raise ValueError(
                f"embedding of shape {e.shape[1:]} (finite: {bool(np.all(np.isfinite(e)))}); the "
                f"monitor needs {dim} finite values (the encoder it was fitted with)"
            )
        node, conf = self.detector.assign(speaker, e)
        return int(node[0]), float(conf[0])

    def replay(self, dialogue: Any, embeddings: np.ndarray | None = None) -> list[Verdict]:
        """Observe every turn of ``dialogue`` in a new session; the verdict of each turn.

        Args:
            dialogue: A record, a list of ``{"speaker", "text"}`` dicts or of turn strings.
            embeddings: One embedding per turn, shape ``(n_turns, d)``; None: encoded.

        Returns:
            One :class:`Verdict` per turn, in order.

        Raises:
            ValueError: A malformed dialogue or turn, or as :meth:`Session.observe`; also when
                ``embeddings`` has another length than the turns.
        """
        from dialfork_dataset.turns import as_turns

        turns = as_turns(dialogue)
        s = self.session()
        if embeddings is None:
            return [s.observe(t["speaker"], t["text"]) for t in turns]
        return [
            s.observe(t["speaker"], t["text"], embedding=e) for t, e in zip(turns, embeddings, strict=True)
        ]


class Session:
    """One conversation under watch (see the module doc). Not thread-safe: one caller at a time.

    Args:
        monitor: The :class:`Monitor` watching it.
        state: None for a new conversation, or a :meth:`state` snapshot (dict or JSON) to resume.

    Raises:
        ValueError: As :meth:`Monitor.session`.
    """

    def __init__(self, monitor: Monitor, state: Mapping[str, Any] | str | None = None):
        from dialfork_metrics.task3.streaming import StepState

        self.monitor = monitor
        self._step = StepState()
        self._wf: dict[str, Any] | None = None  # a workflow-aware monitor's step state
        self.first_alarm: int | None = None
        if state is not None:
            self._restore(state)

    @property
    def turn(self) -> int:
        """Number of turns observed so far."""
        return self._wf["turn"] if self._wf else self._step.n_turns

    @property
    def system_turn(self) -> int:
        """Number of system turns observed so far."""
        return self._wf["system_turn"] if self._wf else self._step.n_system

    @property
    def alarm(self) -> bool:
        """Whether an alarm has been raised in this conversation."""
        return self.first_alarm is not None

    def observe(self, speaker: str, text: str, *, embedding: np.ndarray | None = None) -> Verdict:
        """Take the next turn; returns its :class:`Verdict`. ``embedding`` (the L2-normalised
        encoding of ``text``) skips the encoder. Bad input raises ``ValueError`` and leaves the
        session unchanged.

        Args:
            speaker: ``"user"`` or ``"system"``.
            text: The turn's text (non-empty).
            embedding: Its L2-normalised encoding; None: encoded by the monitor.

        Returns:
            The turn's :class:`Verdict`.

        Raises:
            ValueError: A bad speaker, an empty or non-string text, no encoder and no
                ``embedding``, or an embedding of the wrong size or with NaN/inf.
        """
        where = f"turn {self.turn + 1}"
        _check_speaker(speaker, where)
        _check_text(text, where)
        if self.monitor.workflow_aware:
            if embedding is None:
                e = self.monitor.encode(text) if speaker == "system" else None
            else:
                e = np.asarray(embedding, dtype=np.float64).reshape(-1)
                if e.shape[0] != self.monitor.dim or not np.all(np.isfinite(e)):
                    raise ValueError(
                        f"{where}: embedding of shape {e.shape} (finite: {bool(np.all(np.isfinite(e)))}); "
                        f"the monitor needs {self.monitor.dim} finite values"
                    )
            return self._observe_workflow(speaker, e, text)
        e = self.monitor.encode(text) if embedding is None else embedding
        return self.observe_node(speaker, *self.monitor.assign(speaker, e))

    def _observe_workflow(
        self, speaker: str, embedding: np.ndarray | None, text: str | None = None
    ) -> Verdict:
        mon = self.monitor
        self._wf, r = mon.detector.step(self._wf, speaker, embedding, mon.task, text=text)
        rule = getattr(r, "rule", None)
        reason = (
            {"rule": rule, "node": r.node, "expected": r.expected, "slot": r.slot, "message": r.message}
            if rule
            else alarm_reason(mon.detector, mon.task, r, embedding, self._wf)
            if r.alarm and embedding is not None
            else None
        )
        if r.alarm and self.first_alarm is None:
            self.first_alarm = r.system_turn
        return Verdict(
            turn=self._wf["turn"],
            system_turn=r.system_turn,
            alarm=self.first_alarm is not None,
            first_alarm=self.first_alarm,
            score=r.deviation,
            threshold=float(r.threshold),
            speaker=speaker,
            raised=r.alarm,
            warning=off_task_warning(self._wf, mon.task),
            rule=reason,
        )

    def observe_node(self, speaker: str, node: int, confidence: float) -> Verdict:
        """:meth:`observe` with the turn's node already assigned (:meth:`Monitor.assign`).

        Args:
            speaker: ``"user"`` or ``"system"``.
            node: The turn's global node id.
            confidence: Its node confidence.

        Returns:
            The turn's :class:`Verdict`.
        """
        det = self.monitor.detector
        self._step, r = det.step(self._step, speaker, node, confidence)
        if r.alarm and self.first_alarm is None:
            self.first_alarm = r.system_turn
        return Verdict(
            turn=self._step.n_turns,
            system_turn=self._step.n_system if speaker == "system" else None,
            alarm=self.first_alarm is not None,
            first_alarm=self.first_alarm,
            score=r.score,
            threshold=float(det.threshold_),
            speaker=speaker,
            raised=r.alarm,
        )

    # -- state ------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """A JSON-serialisable snapshot that :meth:`Monitor.session` restores exactly (floats
        round-trip exactly through ``json``).

        Returns:
            A dict with ``format``, ``version``, ``monitor`` (the fingerprint), ``turn``,
            ``system_turn``, ``first_alarm`` and, for a streaming detector, ``context`` (the last
            N-1 node ids) and ``prev_p``; for a workflow-aware one ``workflow`` (the node of each
            system turn, whether it was answered, off-task counts).
        """
        if self.monitor.workflow_aware:
            w = self._wf or {
                "turn": 0,
                "system_turn": 0,
                "nodes": [],
                "answered": [],
                "off_task": {},
                "unfamiliar": 0,
            }
            return {
                "format": STATE_FORMAT,
                "version": STATE_VERSION,
                "monitor": self.monitor.fingerprint,
                "turn": w["turn"],
                "system_turn": w["system_turn"],
                "workflow": w,
                "first_alarm": self.first_alarm,
            }
        s = self._step
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "monitor": self.monitor.fingerprint,
            "turn": s.n_turns,
            "system_turn": s.n_system,
            "context": list(s.context),
            "prev_p": s.prev_p,
            "first_alarm": self.first_alarm,
        }

    def _restore(self, state: Mapping[str, Any] | str) -> None:
        from dialfork_metrics.task3.streaming import StepState

        if isinstance(state, str | bytes):
            try:
                state = json.loads(state)
            except ValueError as e:
                raise ValueError(f"session state is not valid JSON: {e}") from e
        if not isinstance(state, Mapping):
            raise ValueError(f"session state must be a dict (Session.state()), got {type(state).__name__}")
        if state.get("format") != STATE_FORMAT:
            raise ValueError(f"not a guard session state (format {state.get('format')!r})")
        if state.get("version") != STATE_VERSION:
            raise ValueError(
                f"session state version {state.get('version')!r} is not supported ({STATE_VERSION})"
            )
        if state.get("monitor") != self.monitor.fingerprint:
            raise ValueError(
                "this session state belongs to another monitor (fingerprint mismatch): a state "
                "restores only into the monitor that produced it"
            )
        det = self.monitor.detector
        errs = []
        if self.monitor.workflow_aware:
            self._restore_workflow(state)
            return

        def _int(k: str, lo: int = 0) -> int:
            v = state.get(k)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                errs.append(f"{k} must be an integer >= {lo}, got {v!r}")
                return lo
            return v

        n, ns = _int("turn"), _int("system_turn")
        ctx = state.get("context")
        k = det.order_ - 1
        if not isinstance(ctx, list) or any(
            isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < det.vocab_size for x in ctx
        ):
            errs.append(f"context must be a list of node ids in 0..{det.vocab_size - 1}")
            ctx = []
        elif len(ctx) != min(n, k):
            errs.append(f"context holds {len(ctx)} nodes, expected {min(n, k)} after {n} turns")
        prev = state.get("prev_p")
        if (
            n == 0
            and prev is not None
            or n > 0
            and (isinstance(prev, bool) or not isinstance(prev, float | int) or not 0 < prev <= 1)
        ):
            errs.append(
                f"prev_p must be a probability in (0, 1] after the first turn (null before), got {prev!r}"
            )
        if ns > n:
            errs.append(f"system_turn {ns} > turn {n}")
        fa = state.get("first_alarm")
        if fa is not None and (isinstance(fa, bool) or not isinstance(fa, int) or not 1 <= fa <= max(ns, 1)):
            errs.append(f"first_alarm must be null or a system turn in 1..{max(ns, 1)}, got {fa!r}")
        if errs:
            raise ValueError("invalid session state: " + "; ".join(errs))
        self._step = StepState(tuple(ctx), None if prev is None else float(prev), n, ns)
        self.first_alarm = fa

    def _restore_workflow(self, state: Mapping[str, Any]) -> None:
        w = state.get("workflow")
        errs = []
        nodes_ok = set(self.monitor.detector.assigner_.own_nodes(self.monitor.task))
        if not isinstance(w, Mapping):
            raise ValueError("invalid session state: 'workflow' must be the workflow-aware step state")
        n, ns = w.get("turn"), w.get("system_turn")
        for k, v in (("turn", n), ("system_turn", ns), ("unfamiliar", w.get("unfamiliar"))):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                errs.append(f"{k} must be an integer >= 0, got {v!r}")
        nodes, answered, off = w.get("nodes"), w.get("answered"), w.get("off_task")
        if not isinstance(nodes, list) or any(x is not None and x not in nodes_ok for x in nodes):
            errs.append(f"nodes must list nodes of {self.monitor.task!r} (or null)")
        elif not isinstance(ns, int) or len(nodes) != ns:
            errs.append(f"nodes holds {len(nodes)} entries for {ns!r} system turns")
        if (
            not isinstance(answered, list)
            or not all(isinstance(x, bool) for x in answered)
            or (isinstance(nodes, list) and len(answered) != len(nodes))
        ):
            errs.append("answered must be one boolean per system turn")
        if not isinstance(off, Mapping) or any(
            not isinstance(v, int) or isinstance(v, bool) or v < 0 for v in off.values()
        ):
            errs.append("off_task must map task names to counts")
        if isinstance(n, int) and isinstance(ns, int) and ns > n:
            errs.append(f"system_turn {ns} > turn {n}")
        fa = state.get("first_alarm")
        if fa is not None and (
            isinstance(fa, bool)
            or not isinstance(fa, int)
            or not 1 <= fa <= max(ns if isinstance(ns, int) else 1, 1)
        ):
            errs.append(f"first_alarm must be null or a system turn so far, got {fa!r}")
        dialogue = w.get("dialogue")
        if dialogue is not None:
            from dialfork_metrics.task3.workflow.state import state_dict_errors

            errs += state_dict_errors(dialogue, ns if isinstance(ns, int) else 0)
        if errs:
            raise ValueError("invalid session state: " + "; ".join(errs))
        self._wf = {
            "turn": n,
            "system_turn": ns,
            "nodes": list(nodes),
            "answered": list(answered),
            "off_task": dict(off),
            "unfamiliar": w["unfamiliar"],
        }
        if dialogue is not None:
            self._wf["dialogue"] = dict(dialogue)
        if w.get("unsure") is not None:
            if not isinstance(w.get("unsure"), bool):
                raise ValueError("invalid session state: unsure must be a boolean")
            self._wf["unsure"] = w["unsure"]
        self.first_alarm = fa


def dumps_state(state: Mapping[str, Any]) -> str:
    """Compact JSON of a session state (what the proxy stores).

    Args:
        state: A :meth:`Session.state` dict.

    Returns:
        The JSON text, without spaces.

    Raises:
        ValueError: The state holds NaN or inf.
    """
    return json.dumps(state, separators=(",", ":"), allow_nan=False)


__all__ = [
    "Monitor",
    "MonitorFileError",
    "Session",
    "Verdict",
    "detector_fingerprint",
    "dumps_state",
    "off_task_warning",
]
