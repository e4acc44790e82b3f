"""One citation everywhere (issue 31): every BibTeX entry the project prints or ships is the one of
``dialfork_dataset.citation.CITATION``, character for character."""

from __future__ import annotations

import html
import re
import subprocess
from pathlib import Path

import pytest

from dialfork_dataset.citation import CITATION

ROOT = Path(__file__).resolve().parents[1]
MARKDOWN = [
    "README.md",
    "docs/index.md",
    *(f"dialfork_metrics/modules/{m}/README.md" for m in ("flowscore", "flowdtw", "flowkl", "task3")),
]


def _bibtex_blocks(text: str) -> list[str]:
    return re.findall(r"```bibtex\n(.*?)\n```", text, flags=re.S)


def test_every_bibtex_in_the_repository_is_listed_here():
    """A new page with a citation block must be added to MARKDOWN (and so be checked)."""
    # the repository's own pages, tracked or new, never what a run wrote (demo_out/, site/: ignored)
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    found = sorted(
        p for p in set(listed) if (ROOT / p).is_file() and "@misc{" in (ROOT / p).read_text(encoding="utf-8")
    )
    assert found == sorted(MARKDOWN)


@pytest.mark.parametrize("page", MARKDOWN)
def test_markdown_citations_are_the_one(page):
    assert _bibtex_blocks((ROOT / page).read_text(encoding="utf-8")) == [CITATION]


def test_code_citations_are_the_one():
    from dialfork_dataset.builder import CITATION as builder_citation
    from dialfork_metrics.modules import DIALFORK_BIBTEX, metric_info
    from leaderboard.render import about_html

    assert builder_citation == DIALFORK_BIBTEX == CITATION
    assert metric_info("d", "i", None).citation == CITATION
    assert html.escape(CITATION, quote=True) in about_html()  # the leaderboard's About tab


def test_dataset_card_citation_is_the_one(tmp_path):
    from corpus_factory import make_records
    from dialfork_dataset import export_hub_layout, write_jsonl

    write_jsonl(tmp_path / "src" / "r.jsonl", make_records(tasks=("weather", "trivia"), per_task=4, T=5))
    info = export_hub_layout(tmp_path / "src", tmp_path / "hub", blind_key="5a" * 32)
    card = (Path(info["dest"]) / "README.md").read_text(encoding="utf-8")
    assert _bibtex_blocks(card) == [CITATION]
