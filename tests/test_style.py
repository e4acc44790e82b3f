"""The house style holds on the whole tree: ``ruff check`` (ruff.toml's rules) and ``ruff format
--check`` (line length 110), as ``make lint`` runs them; ruff is pinned to one minor version in the
``dev`` extra, so a new release cannot change what passes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("ruff")


@pytest.mark.parametrize("command", [["check", "."], ["format", "--check", "."]], ids=["check", "format"])
def test_ruff(command):
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", *command], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[
        -3000:
    ] + "\nrun `make lint` (or `ruff format .`)"
