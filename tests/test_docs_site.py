"""The documentation site builds with ``mkdocs build --strict``: a broken link or anchor, a page
left out of the navigation or an API reference entry that cannot be collected fails the suite.
The build is offline (mkdocs.yml uses no plugin that fetches anything)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _build(config: Path, site: Path) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        NO_MKDOCS_2_WARNING="1",
        PYTHONPATH=os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
    )
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(config),
            "--site-dir",
            str(site),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocstrings")
    proc = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode == 0, (
        f"mkdocs build --strict failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    )
    api = (tmp_path / "site" / "api" / "dialfork_metrics" / "index.html").read_text(encoding="utf-8")
    # lazily exported names are documented under their package path (docs/hooks/lazy_exports.py)
    for name in ("flowscore", "FlowGraph", "Encoder", "load"):
        assert f'id="dialfork_metrics.{name}"' in api
    assert (tmp_path / "site" / "leaderboard" / "index.html").is_file()
    # Sphinx roles in docstrings are rendered as code, not printed as markup (docs/hooks/sphinx_roles.py)
    pages = [p.read_text(encoding="utf-8") for p in (tmp_path / "site" / "api").rglob("*.html")]
    assert pages and not [
        m for page in pages for m in re.findall(r":(?:class|func|meth|mod|data|attr|exc):<code>", page)
    ]


def test_sphinx_roles_become_code_spans():
    import importlib.util

    spec = importlib.util.spec_from_file_location("sphinx_roles", ROOT / "docs" / "hooks" / "sphinx_roles.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    text = (
        "Uses :class:`~dialfork_metrics.Encoder`, :func:`dialfork_metrics.flowscore`, "
        ":meth:`fit <Detector.fit>` and :py:data:`X`; keeps `code` and a: colon."
    )
    assert mod.rewrite_roles(text) == (
        "Uses `Encoder`, `dialfork_metrics.flowscore`, `fit` and `X`; keeps `code` and a: colon."
    )


def test_strict_build_fails_on_a_broken_reference(tmp_path):
    """The check has teeth: a missing API object and a dead link each fail the strict build."""
    pytest.importorskip("mkdocstrings")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# x\n\n[gone](nowhere.md)\n\n::: dialfork_metrics.no_such_function\n")
    cfg = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    cfg = cfg.split("\nnav:")[0].replace("docs_dir: docs", f"docs_dir: {docs}")
    cfg = cfg.replace(
        "- docs/hooks/lazy_exports.py:LazyExports", f"- {ROOT}/docs/hooks/lazy_exports.py:LazyExports"
    )
    cfg = cfg.replace(
        "- docs/hooks/sphinx_roles.py:SphinxRoles", f"- {ROOT}/docs/hooks/sphinx_roles.py:SphinxRoles"
    )
    cfg = cfg.replace("- docs/hooks/registries.py", f"- {ROOT}/docs/hooks/registries.py")
    cfg = cfg.replace("paths: [.]", f"paths: [{ROOT}]")
    (tmp_path / "mkdocs.yml").write_text(cfg)
    proc = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "nowhere.md" in out or "no_such_function" in out


def test_figures_agree_across_pages_and_with_their_results_file():
    """Issue 37: the pages gave `make test` 18 and 13 minutes (now `make demo`'s minutes are held too), the guard's overhead 3.6, 67 and
    12-26 ms, and a load average of 15 for a results file that records 1.05. One source per figure."""
    import json

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    guard_md = (ROOT / "docs" / "guard.md").read_text(encoding="utf-8")
    minutes = {
        (page, cmd): set(re.findall(rf"make {cmd} .*?about (\d+) minutes", text))
        for page, text in (("README.md", readme), ("docs/index.md", index))
        for cmd in ("demo", "test")
    }
    for cmd in ("demo", "test"):
        assert (
            minutes["README.md", cmd] == minutes["docs/index.md", cmd] and len(minutes["README.md", cmd]) == 1
        ), minutes
    assert (
        "about {} and {} minutes".format(*minutes["README.md", "demo"], *minutes["README.md", "test"])
        in index
    )
    res = json.loads((ROOT / "benchmarks" / "results" / "guard.json").read_text(encoding="utf-8"))
    overhead = f"{res['overhead']['overhead_ms_median']:.1f} ms"
    load = f"load average of {res['load_average_at_start']:.2f}"
    assert f"guard proxy adds {overhead} (median" in readme and load in readme
    perf = guard_md[guard_md.index("## Performance") : guard_md.index("## Limits")]
    table = perf[: perf.index("**Under load.**")]
    assert load in table and f"**{overhead}**" in table
    assert (
        f"**{res['in_process']['ratio_median']:.2f}x**" in table
        and f"{res['load']['turns']:,} turns" in table
    )
    assert "load average of about 15" not in guard_md and "neither met nor refuted" not in guard_md
    for part in ("guardrail", "audit"):  # what the toolkit holds, on both pages
        assert part in readme.split("## Set-up")[0] and part in index.split("## Set-up")[0]
