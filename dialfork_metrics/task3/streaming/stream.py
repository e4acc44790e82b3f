"""The streaming loop's carried state (:class:`StepState`), one turn's outcome (:class:`StepResult`),
and a dialogue being monitored turn by turn (:class:`Stream`).

A stream reads three things from its detector (:class:`StepModel`); the detector
(:class:`~.detector.StreamingDetector`) opens streams and imports this module, not the reverse."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from dialfork_dataset.turns import as_turns


@dataclass(frozen=True)
class StepState:
    """Everything the streaming loop carries from one turn to the next (its size does not grow with
    the dialogue): the last ``N-1`` node ids, ``p_{t-1}``, and the turn and system-turn counts.
    The start of a dialogue is ``StepState()``.

    Attributes:
        context: The node ids of the last ``N-1`` turns (fewer at the start).
        prev_p: ``p_{t-1}``, the previous turn's probability (SS needs it for ``Delta_t``);
            ``None`` before the first turn.
        n_turns: Turns seen so far.
        n_system: System turns seen so far.
    """

    context: tuple[int, ...] = ()
    prev_p: float | None = None
    n_turns: int = 0
    n_system: int = 0


@dataclass(frozen=True)
class StepResult:
    """One turn's outcome (:meth:`StreamingDetector.step`).

    Attributes:
        p: ``p_t`` (``p_t^NC`` for NC detectors).
        score: The statistic compared with the threshold (IT ``p_t / j^gamma``, SS
            ``Delta_t + gamma log j``, ``gamma`` the position weight, ``j`` the system turn; ``None``
            at the first turn of SS).
        alarm: Whether this turn crosses the threshold.
        system_turn: The turn as a 1-based system turn index.
    """

    p: float
    """``p_t`` (``p_t^NC`` for NC detectors)."""
    score: float | None
    """The statistic compared with the threshold: IT ``p_t / j^gamma`` (alarm when below), SS
    ``Delta_t + gamma log j`` (alarm when above; ``None`` at the first turn, which has no jump);
    ``gamma = 0`` (the paper's rule): ``p_t`` and ``Delta_t``."""
    alarm: bool
    """This turn crosses the threshold."""
    system_turn: int
    """The turn as a system turn index (a user turn -> the latest system turn before it, or 1)."""


class StepModel(Protocol):
    """What a :class:`Stream` reads from its detector (a structural protocol): a fitted
    :class:`~.detector.StreamingDetector` (one task's model) is one.

    Attributes:
        (none): a stream reads no attribute, only the three methods :meth:`get_encoder`,
            :meth:`assign` and :meth:`step`.
    """

    def get_encoder(self) -> Any:
        """The encoder of turns given without an embedding.

        Returns:
            The encoder object, or ``None`` (embeddings must be given).
        """
        ...

    def assign(self, speaker: str, E: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The nodes and node confidences of ``speaker``'s turn embeddings ``E`` (one row each).

        Args:
            speaker: ``"user"`` or ``"system"``.
            E: The turn embeddings, shape ``(n, d)``.

        Returns:
            ``(nodes, confidences)``, each of length ``n``.
        """
        ...

    def step(
        self, state: StepState, speaker: str, node: int, confidence: float = 1.0
    ) -> tuple[StepState, StepResult]:
        """One turn of the streaming loop: the next state and the turn's outcome.

        Args:
            state: The state carried from the previous turn.
            speaker: The turn's speaker.
            node: The turn's global node id.
            confidence: The turn's node confidence.

        Returns:
            ``(next_state, result)``.
        """
        ...


class Stream:
    """One dialogue being monitored turn by turn (created by :meth:`StreamingDetector.start`).

    Args:
        detector: The fitted detector (a :class:`~.detector.StreamingDetector`, one task's model)
            whose LM, nodes and threshold are used.
    """

    def __init__(self, detector: StepModel):
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
        """Feed the next turn.

        Args:
            turn: ``{"speaker": "user"|"system", "text": str}`` (or an object with ``speaker`` and
                ``text`` attributes).
            embedding: The turn's precomputed, L2-normalised embedding; ``None`` encodes the text
                with the detector's encoder.

        Returns:
            The system turn index (1-based) of the alarm this turn raises, or ``None``.

        Raises:
            ValueError: A bare string or a malformed turn, or no embedding and a detector without
                an encoder.
        """
        where = f"turn {len(self.turns)}"
        if isinstance(turn, str):
            raise ValueError(
                f"{where}: update() needs a {{speaker, text}} turn; a bare string has no speaker"
            )
        if hasattr(turn, "speaker") and not isinstance(turn, Mapping):
            turn = {"speaker": turn.speaker, "text": turn.text}
        t = as_turns([turn], where=where)[0]
        det = self._det
        if embedding is None:
            encoder = det.get_encoder()
            if encoder is None:
                raise ValueError("update() without an embedding needs a detector built with an encoder")
            embedding = encoder.encode([t["text"]])[0]
        e = np.asarray(embedding, dtype=np.float64).reshape(1, -1)
        node, conf = det.assign(t["speaker"], e)
        return self.update_node(t, int(node[0]), float(conf[0]))

    def update_node(self, turn: Mapping[str, str], node: int, confidence: float = 1.0) -> int | None:
        """Advance with an already-assigned node; the core of :meth:`update`.

        Args:
            turn: ``{"speaker", "text"}`` of the turn (stored as is).
            node: The turn's node id (its speaker's nodes, offset into the joint vocabulary).
            confidence: The node confidence (used by NC detectors; 1.0 otherwise).

        Returns:
            The system turn index (1-based) of the alarm this turn raises, or ``None``.
        """
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
