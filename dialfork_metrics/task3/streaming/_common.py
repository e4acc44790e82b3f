"""Small helpers shared by the streaming detector's modules."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from sklearn.exceptions import NotFittedError as _SklearnNotFittedError


class NotFittedError(_SklearnNotFittedError):
    """A detector was used before :meth:`fit`: scikit-learn's ``NotFittedError`` (a ``ValueError``
    and an ``AttributeError``), so ``sklearn.utils.validation.check_is_fitted`` and the detectors'
    own ``check_is_fitted`` raise the same kind of error."""


def _normalize_rows(C: np.ndarray) -> np.ndarray:
    C = np.asarray(C, dtype=np.float64)
    n = np.linalg.norm(C, axis=1, keepdims=True)
    return C / np.where(n > 0, n, 1.0)


def _where(d: Any, i: int) -> str:
    if isinstance(d, Mapping) and d.get("dialogue_id"):
        return f"dialogue {d['dialogue_id']!r}"
    return f"dialogue #{i}"


def resolve_encoder(encoder: Any):
    """The encoder a streaming detector uses.

    Args:
        encoder: ``None`` (no encoder: the detector is then fed precomputed embeddings), an
            alias or path string, or an encoder object with ``encode()`` and ``encode_dialogues()``.

    Returns:
        ``None``; for a string the process-wide shared instance of
        :func:`dialfork_metrics.encoders.get_encoder`; an encoder object as is.

    Raises:
        TypeError: ``encoder`` is neither ``None``, a string nor an object with ``encode_dialogues``.
    """
    if encoder is None:
        return None
    if isinstance(encoder, str):
        from dialfork_metrics.encoders import get_encoder

        return get_encoder(encoder)
    if not hasattr(encoder, "encode_dialogues"):
        raise TypeError(
            "encoder must be an alias/path string or an object with encode() and encode_dialogues()"
        )
    return encoder


def _encoder_name(encoder: Any) -> str | None:
    if encoder is None:
        return None
    if isinstance(encoder, str):
        return encoder
    alias = getattr(encoder, "alias", None)
    return alias if isinstance(alias, str) else getattr(encoder, "name", None)


def _task_of(d: Any) -> str | None:
    return d.get("task") if isinstance(d, Mapping) else None
