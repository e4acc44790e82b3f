"""Shared test fixtures. Tests run offline and read STAR from ../shared/star or $DIALFORK_STAR_DIR."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_EVALUATE_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _worker_threads() -> int | None:
    """Intra-op threads for one pytest-xdist worker: its share of the cores (None outside xdist)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if workers < 2:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // workers)


# `make test` runs pytest-xdist, one worker per core: each worker (and the processes its tests start)
# runs torch, OpenMP and the BLAS on its share of the cores, so that 2 workers with 2 threads each do
# not oversubscribe 2 cores (threads waiting for each other at every operator). Set before torch loads;
# a variable already set wins.
_THREADS = _worker_threads()
if _THREADS is not None:
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_var, str(_THREADS))
    if "torch" in sys.modules:  # a plugin imported it first
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

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


@pytest.fixture(scope="session")
def embedding_cache(tmp_path_factory) -> str:
    """One disk embedding cache for the tests that run the benchmark on :func:`template_hub` with the
    packaged MiniLM (``cache_dir=``): each text is encoded once per worker, not once per run. Only
    for real models: a tiny random model under a shared name would read another's embeddings."""
    return str(tmp_path_factory.mktemp("embedding_cache"))


@pytest.fixture
def dead_port() -> int:
    """A 127.0.0.1 port that refuses connections for the whole test: bound, never listening, so
    no other process can start listening there meanwhile (a port picked and released could be)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


# The whole suite runs with a toy of each of the five registries registered (metric, hallucination
# type, Task 3 detector, backend, source kind; tests/toy_extensions.py), before any test module is
# collected, as if they were built in: a test that hard-codes the built-in set (a count of types,
# forks or blind lines, the paper's four types as "all types") fails in every run, not in a second
# pass over a few files (issue 52). A test of the paper's four types names them explicitly, or
# takes the `paper_types_only` fixture. DIALFORK_TEST_TOY_EXTENSIONS=0 runs without the toys (to
# tell a toy's failure from another). They are registered through $DIALFORK_PLUGINS
# (dialfork_dataset.plugins), so that the processes a test starts (python -m ..., accelerate launch)
# register them too: tests/ goes on PYTHONPATH.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import toy_extensions  # noqa: E402  (tests/ on sys.path first)

if toy_extensions.enabled():
    from dialfork_dataset.plugins import ENV as _PLUGINS_ENV
    from dialfork_dataset.plugins import load_plugins

    _tests = str(Path(__file__).resolve().parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_tests, os.environ.get("PYTHONPATH")) if p)
    _plugins = [p for p in os.environ.get(_PLUGINS_ENV, "").split(",") if p.strip()]
    os.environ[_PLUGINS_ENV] = ",".join([*_plugins, "toy_extensions:register"])
    load_plugins()


@pytest.fixture
def paper_types_only():
    """The paper's four types alone for one test (a figure or table of the paper): the toy type is
    unregistered, and registered again afterwards (same position: it is the last one). A no-op
    without the toys. A test that checks a fact of the paper still names the four types.

    Yields:
        The registered type codes during the test.
    """
    from dialfork_dataset import taxonomy

    if toy_extensions.TYPE not in taxonomy.names():
        yield taxonomy.names()
        return
    spec = taxonomy.unregister(toy_extensions.TYPE)
    try:
        yield taxonomy.names()
    finally:
        taxonomy.register(spec)
