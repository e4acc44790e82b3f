"""Shared test fixtures. Tests run offline and read STAR from ../shared/star or $DIALFORK_STAR_DIR."""

from __future__ import annotations

import os
import socket
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


@pytest.fixture(scope="session")
def template_corpus(tmp_path_factory, star_dir) -> Path:
    """A small template corpus (generator output folder): 2 tasks x 8 scenarios, 17 dialogues each."""
    from generation import GenerationConfig, generate_corpus

    out = tmp_path_factory.mktemp("template_corpus") / "corpus"
    generate_corpus(
        GenerationConfig(
            star=str(star_dir), out=str(out), tasks=("weather", "doctor_schedule"), per_task=8, seed=0
        ),
        progress=False,
    )
    return out


@pytest.fixture(scope="session")
def template_hub(tmp_path_factory, template_corpus) -> tuple[Path, Path]:
    """The Hub layout of :func:`template_corpus` and its gold folder."""
    from dialfork_dataset import export_hub_layout

    root = tmp_path_factory.mktemp("template_hub")
    info = export_hub_layout(template_corpus, root / "hub", blind_key="11" * 32)
    return Path(info["dest"]), Path(info["gold_dir"])


@pytest.fixture
def dead_port() -> int:
    """A 127.0.0.1 port that refuses connections for the whole test: bound, never listening, so
    no other process can start listening there meanwhile (a port picked and released could be)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]
