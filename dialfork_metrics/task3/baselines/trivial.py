"""Trivial Task 3 baselines (SPEC section 8): always the first system turn, always the last, and
a uniformly random system turn.

They need no training: they are scikit-learn estimators like every detector (``BaseEstimator``:
``get_params``, ``set_params``, ``clone``); ``fit`` checks the parameters and learns nothing, and
they predict without it.
The random baseline is reproducible and order-independent: dialogue ``d`` gets
``rng(seed, sha256(key(d))).integers(1, T + 1)`` where ``key`` is the dialogue id when there is
one, else the transcript, so a prediction does not depend on which other dialogues are scored.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from numbers import Integral
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import Interval

from dialfork_dataset.forks import system_turn_positions
from dialfork_dataset.turns import as_turns, transcript

FORMAT = "dialfork-task3-baseline"


def _num_system_turns(dialogue: Any, where: str) -> int:
    T = len(system_turn_positions(as_turns(dialogue, where=where)))
    if T == 0:
        raise ValueError(f"{where}: has no system turn, so no system turn index can be predicted")
    return T


def _where(d: Any, i: int) -> str:
    if isinstance(d, Mapping) and d.get("dialogue_id"):
        return f"dialogue {d['dialogue_id']!r}"
    return f"dialogue #{i}"


class _Baseline(BaseEstimator):
    """A trivial baseline: a scikit-learn estimator (``get_params``, ``set_params``, ``clone``) whose
    parameters :meth:`fit` checks against ``_parameter_constraints``."""

    name = "baseline"
    _parameter_constraints: dict = {}

    def fit(self, dialogues: Sequence[Any] | None = None, embeddings: Any = None, **_: Any) -> _Baseline:
        """Check the parameters (trivial baselines need no training) and note how many dialogues
        were given (``n_train_``); returns ``self``.

        Args:
            dialogues: Counted, else ignored (None: none).
            embeddings: Ignored.

        Returns:
            The baseline itself.

        Raises:
            InvalidParameterError: A parameter breaks ``_parameter_constraints`` (a ``ValueError``).
        """
        self._validate_params()
        self.n_train_ = 0 if dialogues is None else len(dialogues)
        return self

    def _predict_T(self, T: int, dialogue: Any) -> int | None:
        raise NotImplementedError

    def predict(self, dialogue: Any, embeddings: Any = None) -> int | None:
        """The predicted first deviating system turn of one dialogue.

        Args:
            dialogue: A record, a list of ``{"speaker", "text"}`` dicts or of turn strings.
            embeddings: Ignored (same API as the other detectors).

        Returns:
            A 1-based system turn index in ``1..T``.

        Raises:
            ValueError: The dialogue is malformed or has no system turn, or a bad parameter
                (``InvalidParameterError``).
        """
        self._validate_params()
        return self._predict_T(_num_system_turns(dialogue, _where(dialogue, 0)), dialogue)

    def predict_many(
        self, dialogues: Sequence[Any], embeddings: Any = None, show_progress: bool = False
    ) -> list[int | None]:
        """:meth:`predict` of every dialogue.

        Args:
            dialogues: The dialogues.
            embeddings: Ignored.
            show_progress: Ignored (the baselines are instant).

        Returns:
            One 1-based system turn index per dialogue, in order.

        Raises:
            ValueError: A dialogue is malformed or has no system turn (named by id or index), or a
                bad parameter (``InvalidParameterError``).
        """
        self._validate_params()
        return [self._predict_T(_num_system_turns(d, _where(d, i)), d) for i, d in enumerate(dialogues)]

    def config(self) -> dict[str, Any]:
        """The baseline's settings, as saved.

        Returns:
            ``{"detector": name}`` (plus ``seed`` for the random baseline).
        """
        return {"detector": self.name}

    def save(self, path: str | os.PathLike) -> Path:
        """Save the baseline as a folder holding ``config.json`` (atomically), for
        :func:`~dialfork_metrics.task3.load_detector`.

        Args:
            path: The folder (created if missing).

        Returns:
            The folder's path.
        """
        from dialfork_dataset.jsonl import write_json_atomic

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path / "config.json", {"format": FORMAT, "format_version": 1, **self.config()})
        return path


class FirstTurnBaseline(_Baseline):
    """Always system turn 1."""

    name = "first"

    def _predict_T(self, T: int, dialogue: Any) -> int:
        return 1


class LastTurnBaseline(_Baseline):
    """Always the dialogue's last system turn ``T``."""

    name = "last"

    def _predict_T(self, T: int, dialogue: Any) -> int:
        return T


class RandomTurnBaseline(_Baseline):
    """A uniformly random system turn in ``1..T``, seeded per dialogue (see the module doc).

    Args:
        seed: A non-negative int; with the dialogue's key it seeds each dialogue's draw.

    The constructor only stores ``seed``; ``fit``, ``predict`` and ``predict_many`` check it
    (a non-negative int) and raise scikit-learn's ``InvalidParameterError`` (a ``ValueError``)
    otherwise.
    """

    name = "random"
    _parameter_constraints: dict = {"seed": [Interval(Integral, 0, None, closed="left")]}

    def __init__(self, seed: int = 0):
        self.seed = seed

    def _predict_T(self, T: int, dialogue: Any) -> int:
        if isinstance(dialogue, Mapping) and isinstance(dialogue.get("dialogue_id"), str):
            key = "id:" + dialogue["dialogue_id"]
        else:
            key = "text:" + transcript(dialogue)
        h = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "little")
        return int(np.random.default_rng([self.seed, h]).integers(1, T + 1))

    def config(self) -> dict[str, Any]:
        """The baseline's settings, as saved.

        Returns:
            ``{"detector": "random", "seed": seed}``.
        """
        return {"detector": self.name, "seed": self.seed}


def load_baseline(path: str | os.PathLike) -> _Baseline:
    """Load a baseline saved with ``save(path)``.

    Args:
        path: The folder holding the baseline's ``config.json``.

    Returns:
        A :class:`FirstTurnBaseline`, :class:`LastTurnBaseline` or :class:`RandomTurnBaseline`.

    Raises:
        FileNotFoundError: The folder has no ``config.json``.
        ValueError: ``config.json`` is not JSON or names an unknown baseline.
    """
    meta = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    name = meta.get("detector")
    if name == "first":
        return FirstTurnBaseline()
    if name == "last":
        return LastTurnBaseline()
    if name == "random":
        return RandomTurnBaseline(seed=int(meta.get("seed", 0)))
    raise ValueError(f"{path}: unknown baseline {name!r}")
