"""The step reader: which step of its task a system turn says, or none, with a calibrated probability.

A task-agnostic matching function over the frozen packaged MiniLM: a linear map ``W`` (initialised to
the identity) of turn and step-text embeddings, a turn's score for a step the scaled cosine of the
mapped turn to the nearest mapped text of the step, softmax over the task's steps and a learned
"none" logit. Trained contrastively (cross-entropy over the task's steps + none) on SGD's labelled
system turns and STAR's workflow texts (each phrasing against the other texts of its task), so it
reads the steps of a workflow it never saw: only the step texts change. The probability of the chosen
step is calibrated (isotonic regression on held-out-service predictions).

Inference is numpy (no torch): ``W`` maps the turns and, once per fitted assigner, the step texts.
The shipped weights (``weights/``: ``reader.npz`` and ``config.json``, with the encoder's
fingerprint) load offline; :meth:`StepReader.from_pretrained` also takes a Hub model id.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger("dialfork_metrics.task3.workflow.reader.steps")

WEIGHTS_DIR = Path(__file__).resolve().with_name("weights")
"""The shipped reader's folder."""
REBUILD_COMMAND = (
    "python -m dialfork_metrics.task3.workflow.reader train --sgd ../shared/sgd --star ../shared/star "
    "--out dialfork_metrics/task3/workflow/reader/weights"
)
"""The one command that rebuilds the shipped weights from ../shared."""
FORMAT = "dialfork-step-reader/1"
WEIGHTS_FILE = "reader.npz"
CONFIG_FILE = "config.json"
PROBES = (
    "Which city are you leaving from?",
    "Your table is booked. Anything else?",
    "I found 3 buses; one leaves at 8:40 am.",
)
"""Texts whose embeddings fingerprint the encoder a reader was trained for."""
_FLOOR = -10.0  # the similarity of a hidden text (finite: -inf would make the scale's gradient NaN)
_KEYS = ("W", "scale", "bias", "cal_x", "cal_y")


class ReaderWeightsError(ValueError):
    """A reader's weights are missing, malformed or trained for another encoder (one line: the file
    and the rebuild command)."""


def _refuse(path: Path | str, problem: str) -> ReaderWeightsError:
    return ReaderWeightsError(f"{path}: {problem}; rebuild the weights with `{REBUILD_COMMAND}`")


def _unit(X: np.ndarray) -> np.ndarray:
    X = np.asarray(X, dtype=np.float32)
    n = np.linalg.norm(X, axis=-1, keepdims=True)
    return X / np.where(n > 0, n, 1.0)


def encoder_fingerprint(encoder: Any) -> np.ndarray:
    """The encoder's embeddings of :data:`PROBES` (what a saved reader checks an encoder by).

    Args:
        encoder: An object with ``encode(texts)``.

    Returns:
        np.ndarray: Shape ``(len(PROBES), d)``, unit rows.
    """
    return _unit(np.asarray(encoder.encode(list(PROBES)), dtype=np.float32))


class StepReader:
    """Reads which step of a task a system turn says (scikit-learn / Hugging Face conventions).

    Args:
        encoder: The encoder alias it reads embeddings of (``"minilm"``, the packaged MiniLM).
        epochs: Training passes over the examples.
        lr: Adam's learning rate.
        batch_size: Examples per step (one task per batch).
        l2: Weight of ``||W - I||^2`` (keeps the map near the encoder's own geometry).
        hide_self: A phrasing example (``hide`` in :meth:`fit`) does not see its task's texts at
            least this similar to it (itself and its value variants).
        seed: Seeds the initialisation and the batch order.

    Fitted attributes: ``W_`` (``(d, d)``), ``scale_``, ``bias_`` (the none logit), ``cal_x_`` /
    ``cal_y_`` (the isotonic calibration of the chosen step's probability; empty: uncalibrated),
    ``fingerprint_`` (:func:`encoder_fingerprint`, or None), ``info_`` (training summary).
    """

    def __init__(
        self,
        encoder: str = "minilm",
        epochs: int = 16,
        lr: float = 2e-3,
        batch_size: int = 256,
        l2: float = 1e-3,
        hide_self: float = 0.9,
        seed: int = 0,
    ):
        self.encoder = encoder
        self.epochs = epochs
        self.lr = lr
        self.batch_size = batch_size
        self.l2 = l2
        self.hide_self = hide_self
        self.seed = seed

    # ------------------------------------------------------------------ training
    def fit(
        self,
        E: np.ndarray,
        tables: Mapping[str, tuple[np.ndarray, np.ndarray, int]],
        table_of: Sequence[str],
        targets: Sequence[Sequence[int]],
        hide: Sequence[bool] | None = None,
        fingerprint: np.ndarray | None = None,
    ) -> StepReader:
        """Train the map on labelled turns.

        Args:
            E: Turn embeddings, ``(n, d)``.
            tables: Table name -> ``(P, owners, n_nodes)``: the candidate steps of a task (text
                embeddings, the step index of each text, the number of steps).
            table_of: The table of each turn.
            targets: Each turn's correct step indices (several: any of them; empty: none).
            hide: Per turn, whether it is one of its table's own texts (a phrasing): its nearly
                identical texts are hidden from it (``hide_self``).
            fingerprint: The encoder's :func:`encoder_fingerprint` (saved with the weights).

        Returns:
            self.

        Raises:
            ValueError: Inputs of different lengths, an unknown table, or a bad target index.
        """
        import torch

        E = _unit(E)
        n, d = E.shape
        if not (len(table_of) == len(targets) == n) or (hide is not None and len(hide) != n):
            raise ValueError(f"StepReader.fit: {n} turns, {len(table_of)} tables, {len(targets)} targets")
        unknown = sorted(set(table_of) - set(tables))
        if unknown:
            raise ValueError(f"StepReader.fit: unknown table(s) {unknown[:5]}")
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # small matrices: one thread is as fast, and holds up on busy cores
        try:
            return self._fit(torch, E, tables, table_of, targets, hide, fingerprint)
        finally:
            torch.set_num_threads(threads)

    def _fit(self, torch, E, tables, table_of, targets, hide, fingerprint) -> StepReader:
        n, d = E.shape
        torch.manual_seed(self.seed)
        rng = np.random.default_rng(self.seed)
        hide = np.zeros(n, bool) if hide is None else np.asarray(hide, bool)
        prepared = {}
        for name, (P, owners, n_nodes) in tables.items():
            owners = np.asarray(owners, np.int64)
            rows = [np.flatnonzero(owners == j) for j in range(n_nodes)]
            width = max(1, max((len(r) for r in rows), default=1))
            idx = np.zeros((n_nodes, width), np.int64)
            ok = np.zeros((n_nodes, width), bool)
            for j, r in enumerate(rows):
                idx[j, : len(r)], ok[j, : len(r)] = r, True
            prepared[name] = (torch.tensor(_unit(P)), torch.tensor(idx), torch.tensor(ok), n_nodes)
        # a phrasing whose step has no other text (all hidden from it) teaches nothing: left out
        usable = np.ones(n, bool)
        for i in np.flatnonzero(hide):
            P, owners, _ = tables[table_of[i]]
            rows = np.isin(np.asarray(owners), list(targets[i]))
            usable[i] = not targets[i] or bool((_unit(P)[rows] @ E[i] < self.hide_self).any())
        W = torch.nn.Parameter(torch.eye(d))
        log_scale = torch.nn.Parameter(torch.tensor(float(np.log(20.0))))
        bias = torch.nn.Parameter(torch.tensor(10.0))
        opt = torch.optim.Adam([W, log_scale, bias], lr=self.lr)
        eye = torch.eye(d)
        by_table: dict[str, np.ndarray] = {}
        for i, t in enumerate(table_of):
            if usable[i]:
                by_table.setdefault(t, []).append(i)
        by_table = {t: np.asarray(v) for t, v in by_table.items()}
        Et = torch.tensor(E)
        losses = []
        for _ in range(int(self.epochs)):
            batches = []
            for t, ix in by_table.items():
                ix = ix[rng.permutation(len(ix))]
                batches += [(t, ix[k : k + self.batch_size]) for k in range(0, len(ix), self.batch_size)]
            total = 0.0
            for b in rng.permutation(len(batches)):
                t, ix = batches[b]
                P, idx, ok, n_nodes = prepared[t]
                logits = self._torch_logits(Et[ix], P, idx, ok, W, log_scale, bias, hide[ix])
                pos = torch.zeros(len(ix), n_nodes + 1, dtype=torch.bool)
                for r, i in enumerate(ix):
                    tg = list(targets[i])
                    if any(j < 0 or j >= n_nodes for j in tg):
                        raise ValueError(f"StepReader.fit: turn {i}: target {tg} outside 0..{n_nodes - 1}")
                    pos[r, tg if tg else [n_nodes]] = True
                pl = logits.masked_fill(~pos, float("-inf")).logsumexp(1)
                keep = torch.isfinite(pl)
                if not bool(keep.any()):
                    continue
                loss = (logits.logsumexp(1) - pl)[keep].mean() + self.l2 * ((W - eye) ** 2).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += float(loss.detach()) * len(ix)
            losses.append(total / max(n, 1))
        self.W_ = W.detach().numpy().astype(np.float32)
        self.scale_ = float(log_scale.detach().exp())
        self.bias_ = float(bias.detach())
        self.cal_x_ = np.zeros(0, np.float32)
        self.cal_y_ = np.zeros(0, np.float32)
        self.fingerprint_ = None if fingerprint is None else _unit(fingerprint)
        self.info_ = {
            "examples": int(usable.sum()),
            "tables": len(tables),
            "loss": [round(x, 4) for x in losses],
        }
        return self

    def _torch_logits(self, E, P, idx, ok, W, log_scale, bias, hide):
        import torch

        q = torch.nn.functional.normalize(E @ W.T, dim=1)
        k = torch.nn.functional.normalize(P @ W.T, dim=1)
        cos = q @ k.T
        if hide.any():
            raw = E @ P.T
            cos = cos.masked_fill(torch.tensor(hide)[:, None] & (raw >= self.hide_self), _FLOOR)
        node = cos[:, idx].masked_fill(~ok[None], _FLOOR).amax(-1)
        return torch.cat([log_scale.exp() * node, bias.expand(len(E))[:, None]], 1)

    # ------------------------------------------------------------------ inference
    def check_is_fitted(self) -> None:
        """Raise unless fitted or loaded.

        Raises:
            ValueError: Not fitted.
        """
        if not hasattr(self, "W_"):
            raise ValueError("StepReader is not fitted: call fit(...) or StepReader.from_pretrained(folder)")

    def project(self, X: np.ndarray) -> np.ndarray:
        """Map embeddings into the reader's space (unit rows).

        Args:
            X: Embeddings, ``(n, d)``.

        Returns:
            np.ndarray: ``(n, d)``.
        """
        self.check_is_fitted()
        X = np.asarray(X, np.float32).reshape(-1, self.W_.shape[1])
        return _unit(X @ self.W_.T)

    def probabilities(self, S: np.ndarray) -> np.ndarray:
        """Softmax over steps and none from the reader's node similarities.

        Args:
            S: Projected node similarities, ``(n, k)`` (``-inf``: a step the turn may not be).

        Returns:
            np.ndarray: ``(n, k + 1)``, the last column none.
        """
        self.check_is_fitted()
        Z = np.concatenate([self.scale_ * np.asarray(S, np.float64), np.full((len(S), 1), self.bias_)], 1)
        Z -= Z.max(axis=1, keepdims=True)
        P = np.exp(Z)
        return P / P.sum(axis=1, keepdims=True)

    def calibrated(self, p: np.ndarray) -> np.ndarray:
        """The calibrated probability that a chosen step is right, from its raw probability.

        Args:
            p: Raw probabilities of the chosen steps.

        Returns:
            np.ndarray: Values in [0, 1] (the raw ones when uncalibrated).
        """
        p = np.clip(np.asarray(p, np.float64), 0.0, 1.0)
        if not len(getattr(self, "cal_x_", ())):
            return p
        return np.clip(np.interp(p, self.cal_x_, self.cal_y_), 0.0, 1.0)

    def calibrate(self, p: np.ndarray, correct: np.ndarray) -> StepReader:
        """Fit the isotonic calibration of the chosen step's probability (held-out predictions).

        A turn the assigner leaves unread (no probability: NaN, e.g. a generic phrasing it keeps) says
        nothing of the calibration and is left out.

        Args:
            p: Raw probabilities of the chosen steps.
            correct: Whether each chosen step was right.

        Returns:
            self.
        """
        from sklearn.isotonic import IsotonicRegression

        p, correct = np.asarray(p, np.float64), np.asarray(correct, np.float64)
        keep = np.isfinite(p)
        iso = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(p[keep], correct[keep])
        self.cal_x_ = np.asarray(iso.X_thresholds_, np.float32)
        self.cal_y_ = np.asarray(iso.y_thresholds_, np.float32)
        return self

    def predict_proba(self, E: np.ndarray, P: np.ndarray, owners: np.ndarray, n_nodes: int) -> np.ndarray:
        """Raw probabilities of each step of one task and of none, per turn.

        Args:
            E: Turn embeddings ``(n, d)``.
            P: The task's step-text embeddings ``(m, d)``.
            owners: The step index of each text.
            n_nodes: The number of steps.

        Returns:
            np.ndarray: ``(n, n_nodes + 1)``, the last column none.
        """
        S = self.project(E) @ self.project(P).T
        out = np.full((len(S), int(n_nodes)), -np.inf)
        owners = np.asarray(owners, np.int64)
        for j in range(int(n_nodes)):
            cols = owners == j
            if cols.any():
                out[:, j] = S[:, cols].max(axis=1)
        return self.probabilities(out)

    def read(
        self, task_steps: Mapping[str, Sequence[str]], texts: Sequence[str], encoder: Any = None
    ) -> list[tuple[str | None, float]]:
        """Read turns against a task's steps.

        Args:
            task_steps: Step -> its texts (a workflow file's ``say`` / ``alternatives``; STAR's
                templates and phrasings): :func:`~dialfork_metrics.task3.workflow.nodes.node_texts`.
            texts: The system turns.
            encoder: An encoder object (None: :attr:`encoder`, checked against the fingerprint).

        Returns:
            list[tuple[str | None, float]]: Per turn the step (None: none fits) and the calibrated
            probability that it is right.

        Raises:
            ReaderWeightsError: The encoder is not the one the reader was trained for.
        """
        from dialfork_metrics.encoders import get_encoder

        enc = get_encoder(encoder if encoder is not None else self.encoder)
        self.check_encoder(enc)
        names = list(task_steps)
        flat = [(j, t) for j, n in enumerate(names) for t in task_steps[n]]
        P = np.asarray(enc.encode([t for _, t in flat]), np.float32)
        E = np.asarray(enc.encode(list(texts)), np.float32)
        pr = self.predict_proba(E, P, np.array([j for j, _ in flat]), len(names))
        best = pr.argmax(axis=1)
        conf = self.calibrated(pr.max(axis=1))
        return [(names[b] if b < len(names) else None, float(c)) for b, c in zip(best, conf)]

    def check_encoder(self, encoder: Any, where: str | Path | None = None) -> None:
        """Refuse an encoder other than the one the reader was trained for.

        Args:
            encoder: An object with ``encode``.
            where: The weights' file, for the message.

        Raises:
            ReaderWeightsError: Another encoder (dimension or fingerprint differ).
        """
        self.check_is_fitted()
        fp = getattr(self, "fingerprint_", None)
        where = where or getattr(self, "path_", "the reader")
        if fp is None:
            return
        got = encoder_fingerprint(encoder)
        if got.shape != fp.shape or float(np.min(np.sum(got * fp, axis=1))) < 0.999:
            raise _refuse(
                where,
                f"trained for encoder {self.info_.get('encoder_id', self.encoder)!r}, not for "
                f"{getattr(encoder, 'name', type(encoder).__name__)!r} (fingerprint differs)",
            )

    def matches(self, encoder: Any) -> bool:
        """Whether ``encoder`` is the one the reader was trained for (no exception).

        Args:
            encoder: An object with ``encode``.

        Returns:
            bool: True when the fingerprints agree.
        """
        try:
            self.check_encoder(encoder)
        except ReaderWeightsError:
            return False
        return True

    # ------------------------------------------------------------------ saving
    def save_pretrained(self, folder: str | os.PathLike) -> Path:
        """Write ``reader.npz`` and ``config.json`` (atomically) into ``folder``.

        Args:
            folder: The folder (created).

        Returns:
            Path: The folder.
        """
        import io

        from dialfork_dataset.atomic import write_bytes_atomic, write_text_atomic

        self.check_is_fitted()
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        np.savez_compressed(
            buf,
            W=self.W_.astype(np.float16),
            scale=np.float32(self.scale_),
            bias=np.float32(self.bias_),
            cal_x=self.cal_x_,
            cal_y=self.cal_y_,
        )
        data = buf.getvalue()
        write_bytes_atomic(folder / WEIGHTS_FILE, data)
        cfg = {
            "format": FORMAT,
            "encoder": self.encoder,
            "encoder_id": self.info_.get("encoder_id", self.encoder),
            "dim": int(self.W_.shape[1]),
            "fingerprint": None if self.fingerprint_ is None else np.round(self.fingerprint_, 6).tolist(),
            "params": {
                k: getattr(self, k) for k in ("epochs", "lr", "batch_size", "l2", "hide_self", "seed")
            },
            "sha256": hashlib.sha256(data).hexdigest(),
            "info": self.info_,
            "rebuild": REBUILD_COMMAND,
        }
        write_text_atomic(folder / CONFIG_FILE, json.dumps(cfg, indent=1) + "\n")
        return folder

    @classmethod
    def from_pretrained(cls, folder_or_id: str | os.PathLike, **hub_kwargs: Any) -> StepReader:
        """Load a saved reader from a folder, or from a Hub model id (``huggingface_hub.snapshot_download``).

        Args:
            folder_or_id: A folder holding ``reader.npz`` and ``config.json``, or a Hub model id.
            **hub_kwargs: Passed to ``snapshot_download`` for a Hub id (``revision``, ``token``...).

        Returns:
            StepReader: The reader (its encoder is checked when it reads).

        Raises:
            ReaderWeightsError: A missing, corrupt or altered file (one line with the rebuild command).
        """
        p = Path(folder_or_id).expanduser()
        if not p.exists() and "/" in str(folder_or_id) and not str(folder_or_id).startswith((".", "/")):
            from huggingface_hub import snapshot_download

            p = Path(snapshot_download(str(folder_or_id), **hub_kwargs))
        cf, wf = p / CONFIG_FILE, p / WEIGHTS_FILE
        for f in (cf, wf):
            if not f.is_file():
                raise _refuse(f, "missing")
        try:
            cfg = json.loads(cf.read_text(encoding="utf-8"))
            assert isinstance(cfg, dict) and cfg.get("format") == FORMAT
        except (OSError, ValueError, AssertionError):
            raise _refuse(cf, f"not a step reader's config (JSON with format {FORMAT!r})") from None
        data = wf.read_bytes()
        if cfg.get("sha256") and hashlib.sha256(data).hexdigest() != cfg["sha256"]:
            raise _refuse(wf, "corrupt (its sha256 differs from config.json's)")
        try:
            import io

            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                arrays = {k: np.asarray(z[k]) for k in _KEYS}
        except Exception as e:
            raise _refuse(wf, f"unreadable or incomplete ({type(e).__name__}: {e})") from None
        d = int(cfg.get("dim", -1))
        if arrays["W"].shape != (d, d):
            raise _refuse(wf, f"W has shape {arrays['W'].shape}, config.json says dim {d}")
        r = cls(encoder=cfg.get("encoder", "minilm"), **cfg.get("params", {}))
        r.W_ = arrays["W"].astype(np.float32)
        r.scale_, r.bias_ = float(arrays["scale"]), float(arrays["bias"])
        r.cal_x_, r.cal_y_ = arrays["cal_x"].astype(np.float32), arrays["cal_y"].astype(np.float32)
        fp = cfg.get("fingerprint")
        r.fingerprint_ = None if fp is None else np.asarray(fp, np.float32)
        if r.fingerprint_ is not None and r.fingerprint_.shape[-1] != d:
            raise _refuse(cf, f"fingerprint of dimension {r.fingerprint_.shape[-1]}, weights of {d}")
        r.info_ = dict(cfg.get("info") or {})
        r.path_ = wf
        return r

    def push_to_hub(self, repo_id: str, **kwargs: Any) -> Any:
        """Upload the saved reader to a Hub model repository (thin: ``HfApi.upload_folder``).

        Args:
            repo_id: ``org/name``.
            **kwargs: Passed to ``upload_folder`` (``token``, ``commit_message``...).

        Returns:
            Any: ``upload_folder``'s result.
        """
        import tempfile

        from huggingface_hub import HfApi

        api = HfApi()
        api.create_repo(repo_id, exist_ok=True, token=kwargs.get("token"))
        with tempfile.TemporaryDirectory() as tmp:
            self.save_pretrained(tmp)
            return api.upload_folder(folder_path=tmp, repo_id=repo_id, **kwargs)


_DEFAULT: dict[str, StepReader] = {}


def default_reader() -> StepReader:
    """The shipped reader (``weights/``), loaded once per process.

    Returns:
        StepReader: The reader.

    Raises:
        ReaderWeightsError: The shipped weights are missing or corrupt (the file and the rebuild command).
    """
    if "r" not in _DEFAULT:
        _DEFAULT["r"] = StepReader.from_pretrained(WEIGHTS_DIR)
    return _DEFAULT["r"]


__all__ = [
    "CONFIG_FILE",
    "FORMAT",
    "PROBES",
    "REBUILD_COMMAND",
    "ReaderWeightsError",
    "StepReader",
    "WEIGHTS_DIR",
    "WEIGHTS_FILE",
    "default_reader",
    "encoder_fingerprint",
]
