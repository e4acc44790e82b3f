"""Shared test fixtures. Tests run offline and read STAR from ../shared/star or $DIALFORK_STAR_DIR."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_EVALUATE_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]


def star_path() -> Path:
    env = os.environ.get("DIALFORK_STAR_DIR")
    p = Path(env) if env else ROOT.parent / "shared" / "star"
    return p.resolve()


@pytest.fixture(scope="session")
def star_dir() -> Path:
    p = star_path()
    if not (p / "tasks").is_dir():
        pytest.fail(f"STAR not found at {p}: set DIALFORK_STAR_DIR")
    return p
