"""The code examples of README.md and docs/*.md run, so they never go stale.

Sybil (https://sybil.readthedocs.io/) parses the Markdown. Every fenced ``python`` block is
executed, every ``bash`` block runs in ``bash -e``; the blocks of one page share a namespace and
run in page order, in a working folder laid out as ``make demo`` leaves it (``demo_out/corpus``,
``demo_out/hub``, ``demo_out/hub-gold``, ``demo_out/guard/weather.monitor``; a small corpus
generated from STAR, the packaged MiniLM; ``examples/`` as in the repository) with ``../shared/star``
pointing at STAR and ``python``
on the ``PATH`` being this interpreter. A block that cannot run here says why, right above its
fence: ``<!-- skip: next "needs a GPU" -->`` (or ``skip: start`` ... ``skip: end`` around
several). Blocks in other fences (``text``, ``json``, ``bibtex``, none) are output or formats.

Why Sybil rather than pytest-examples: Sybil's skip directive carries a reason that the reader of
the Markdown sees, a page's blocks share one namespace (a page reads like a session), and a block
language gets its own evaluator (here: bash), while pytest-examples only runs Python and is
built around rewriting printed output in place.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from unittest import SkipTest

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = ("python", "bash")
SKIP_RE = re.compile(r"<!--\s*skip:\s*(next|start|end)\b(.*?)-->")


def _sybil(bash_env: dict[str, str], cwd: Path):
    from sybil import Sybil
    from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser

    def run_bash(example) -> None:
        source = example.parsed
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", source],
            cwd=cwd,
            env=bash_env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if proc.returncode != 0:
            raise AssertionError(
                f"exit {proc.returncode}\n--- command\n{source}\n--- stdout\n"
                f"{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
            )

    return Sybil(parsers=[PythonCodeBlockParser(), CodeBlockParser("bash", run_bash), SkipParser()])


def test_every_skip_gives_a_reason():
    """A block marked as not runnable says why (a bare ``skip: next`` would hide it silently)."""
    bad = []
    for page in PAGES:
        for m in SKIP_RE.finditer(page.read_text(encoding="utf-8")):
            if m.group(1) != "end" and not m.group(2).strip().strip('"'):
                line = page.read_text(encoding="utf-8")[: m.start()].count("\n") + 1
                bad.append(f"{page.relative_to(ROOT)}:{line}: {m.group(0)}")
    assert not bad, "skip directives without a reason:\n" + "\n".join(bad)


def test_runnable_fences_are_found():
    """The parser sees the README's quickstarts (a guard against a silently empty collection)."""
    sb = _sybil(dict(os.environ), ROOT)
    langs = re.findall(r"^```(\w+)", (ROOT / "README.md").read_text(encoding="utf-8"), flags=re.M)
    n_runnable = sum(lang in RUNNABLE for lang in langs)
    assert n_runnable >= 5
    examples = [e for e in sb.parse(ROOT / "README.md") if e.region.evaluator is not None]
    # runnable blocks + skip directives
    assert len(examples) >= n_runnable


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, template_corpus, template_hub, star_dir) -> tuple[Path, dict[str, str]]:
    """A folder laid out as after ``make demo`` (small: the session's template corpus)."""
    top = tmp_path_factory.mktemp("docs_examples")
    ws = top / "repo"
    (top / "shared").mkdir()
    (top / "shared" / "star").symlink_to(star_dir, target_is_directory=True)
    demo = ws / "demo_out"
    demo.mkdir(parents=True)
    hub, gold = template_hub
    (demo / "corpus").symlink_to(template_corpus, target_is_directory=True)
    (demo / "hub").symlink_to(hub, target_is_directory=True)
    (demo / "hub-gold").symlink_to(gold, target_is_directory=True)
    (ws / "examples").symlink_to(ROOT / "examples", target_is_directory=True)  # workflow files
    bindir = top / "bin"
    bindir.mkdir()
    for name in ("python", "python3"):  # a wrapper, not a symlink: a venv is found from the path run
        (bindir / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        (bindir / name).chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["DIALFORK_STAR_DIR"] = str(star_dir)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "dialfork_metrics.guard",
            "replay",
            "--fit",
            "--data",
            str(demo / "hub"),
            "--task",
            "weather",
            "--monitor",
            str(demo / "guard" / "weather.monitor"),
        ],
        cwd=ws,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return ws, env


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_page_examples_run(page: Path, workspace, monkeypatch):
    ws, env = workspace
    monkeypatch.chdir(ws)
    monkeypatch.setenv("DIALFORK_STAR_DIR", env["DIALFORK_STAR_DIR"])
    document = _sybil(env, ws).parse(page)
    ran, skipped = 0, []
    for example in document:
        try:
            example.evaluate()
        except SkipTest as e:
            skipped.append(f"line {example.line}: {e}")
            continue
        except Exception as e:
            raise AssertionError(
                f"{page.relative_to(ROOT)}, example at line {example.line} failed: {type(e).__name__}: {e}"
            ) from e
        ran += 1
    if ran == 0 and not skipped:
        pytest.skip(f"{page.name}: no runnable example")
