"""The streaming loop's carried state (:class:`StepState`), one turn's outcome (:class:`StepResult`),
and a dialogue being monitored turn by turn (:class:`Stream`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dialfork_dataset.turns import as_turns

if TYPE_CHECKING:
    from .detector import StreamingDetector


@dataclass(frozen=True)
class StepState:
    """Everything the streaming loop carries from one turn to the next (its size does not grow with
    the dialogue): the last ``N-1`` node ids, ``p_{t-1}``, and the turn and system-turn counts.
    The start of a dialogue is ``StepState()``."""

    context: tuple[int, ...] = ()
    prev_p: float | None = None
    n_turns: int = 0
    n_system: int = 0


@dataclass(frozen=True)
class StepResult:
    """One turn's outcome (:meth:`StreamingDetector.step`)."""

    p: float
    """``p_t`` (``p_t^NC`` for NC detectors)."""
    score: float | None
    """The statistic compared with the threshold: IT ``p_t`` (alarm when below), SS ``Delta_t``
    (alarm when above; ``None`` at the first turn, which has no jump)."""
    alarm: bool
    """This turn crosses the threshold."""
    system_turn: int
    """The turn as a system turn index (a user turn -> the latest system turn before it, or 1)."""


class Stream:
    """One dialogue being monitored turn by turn (created by :meth:`StreamingDetector.start`)."""

    def __init__(self, detector: StreamingDetector):
        self._det = detector
        self.turns: list[dict[str, str]] = []
        self.nodes: list[int] = []
        self.p: list[float] = []
        """``p_t`` (``p_t^NC`` for NC detectors) of every turn seen so far."""
        self.alarms: list[int] = []
        """Every alarm raised so far, as system turn indices (one per anomalous turn)."""
        self.flag: int | None = None
        """The first alarm (the detector's prediction for the dialogue), or ``None`` so far."""
        self._state = StepState()

    def update(self, turn: Any, embedding: np.ndarray | None = None) -> int | None:
        """Feed the next turn (``{"speaker", "text"}``); returns the system turn index of the alarm
        this turn raises, or ``None``. ``embedding`` skips the encoder (precomputed, L2-normalised)."""
        where = f"turn {len(self.turns)}"
        if isinstance(turn, str):
            raise ValueError(f"{where}: update() needs a {{speaker, text}} turn; a bare string has no speaker")
        if hasattr(turn, "speaker") and not isinstance(turn, Mapping):
            turn = {"speaker": turn.speaker, "text": turn.text}
        t = as_turns([turn], where=where)[0]
        det = self._det
        if embedding is None:
            if det.encoder is None:
                raise ValueError("update() without an embedding needs a detector built with an encoder")
            embedding = det.encoder.encode([t["text"]])[0]
        e = np.asarray(embedding, dtype=np.float64).reshape(1, -1)
        node, conf = det._assign(t["speaker"], e)
        return self.update_node(t, int(node[0]), float(conf[0]))

    def update_node(self, turn: Mapping[str, str], node: int, confidence: float = 1.0) -> int | None:
        """Advance with an already-assigned node (and its confidence); the core of :meth:`update`."""
        self._state, r = self._det.step(self._state, turn["speaker"], node, confidence)
        self.turns.append(dict(turn))
        self.nodes.append(node)
        self.p.append(r.p)
        if not r.alarm:
            return None
        self.alarms.append(r.system_turn)
        if self.flag is None:
            self.flag = r.system_turn
        return r.system_turn


_Stream = Stream  # the old private name
