"""Generation from a workflow file of one task, or of a task for watching only (issue 46, item 6)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from dialfork_dataset.taxonomy import FORK_POSITIONS, forks_per_source, substitute_types
from generation.cli import main

PIZZA = """\
format: dialfork-workflow/1
name: pizza
description: A pizza shop.
tasks:
  - name: pizza_order
    domain: food
    description: You are a pizza shop assistant. Take the customer's order, then confirm it.
    request: order a pizza
{budget}    api:
      function: order_pizza
      inputs:
        - {{name: Size, type: Categorical, readable: size, categories: [small, medium, large]}}
        - {{name: Topping, type: Categorical, readable: topping, categories: [mushrooms, ham, olives]}}
      required: [Size, Topping]
    steps:
      - id: hello
        say: Hello, this is the pizza shop. What can I do for you?
        next: pizza_ask_size
      - id: pizza_ask_size
        ask: Size
        say: What size would you like?
        next: pizza_ask_topping
      - id: pizza_ask_topping
        ask: Topping
        say: Which topping would you like?
        next: pizza_confirm
      - id: pizza_confirm
        say: "So that's a {{size}} pizza with {{topping}}. Shall I place the order?"
        next: pizza_done
      - id: pizza_done
        say: Your {{size}} pizza with {{topping}} is on its way.
        next: anything_else
      - id: anything_else
        say: Anything else?
      - id: pizza_bye
        say: Goodbye!
{scenarios}"""
SCENARIOS = """\
    scenarios:
      - {id: p01, goal: Order a large pizza with mushrooms., slots: {Size: large, Topping: mushrooms}}
      - {id: p02, goal: Order a small pizza with ham., slots: {Size: small, Topping: ham}}
"""


def _write(tmp_path: Path, watch_only: bool = False) -> Path:
    f = tmp_path / "pizza.yaml"
    text = PIZZA.format(
        budget="" if watch_only else "    length_budget: 20\n", scenarios="" if watch_only else SCENARIOS
    )
    f.write_text(text, encoding="utf-8")
    return f


def test_a_one_task_file_makes_the_forks_it_can_and_says_which_it_skips(tmp_path, capsys, caplog):
    f = _write(tmp_path)
    out = tmp_path / "out"
    with caplog.at_level(logging.WARNING, logger="generation"):
        rc = main(["--backend", "template", "--source", f"workflow:{f}", "--out", str(out), "--no-progress"])
    assert rc == 0, capsys.readouterr().err
    rows = [json.loads(x) for p in sorted(out.glob("*.jsonl")) for x in p.read_text().splitlines()]
    types = {r["hallucination_type"] for r in rows}
    assert "WIC" not in types and {"SSPC", "GR", "CSC"} <= types
    # every registered type but those that follow a substitute task (WIC), at every fork position
    per_source = forks_per_source() - len(substitute_types()) * len(FORK_POSITIONS)
    assert sum(r["hallucination_type"] is None for r in rows) == 2 and len(rows) == 2 * (1 + per_source)
    warning = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warning) == 1 and "one task ('pizza_order')" in warning[0]
    assert (
        "WIC forks follow another task's workflow and are skipped, 4 fewer forks per source (8 in all"
        in (warning[0])
    )
    # the file's own {size} slot, not STAR's alias (size -> FloorSquareMeters)
    d_plus = next(r for r in rows if r["dialogue_id"].endswith("p01") and r["hallucination_type"] is None)
    system = [t["text"] for t in d_plus["turns"] if t["speaker"] == "system"]
    assert "So that's a large pizza with mushrooms. Shall I place the order?" in system
    assert not any("the one you asked for" in t or "as requested" in t for t in system)


def test_a_compound_plan_needing_another_task_is_refused_in_one_line(tmp_path, capsys):
    f = _write(tmp_path)
    rc = main(
        [
            "--backend",
            "template",
            "--source",
            f"workflow:{f}",
            "--out",
            str(tmp_path / "o"),
            "--compound",
            "WIC@1,GR@3",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "WIC follows another task's workflow" in err and str(f) in err


def test_a_watch_only_file_is_refused_in_one_line_naming_what_to_add(tmp_path, capsys):
    f = _write(tmp_path, watch_only=True)
    rc = main(
        ["--backend", "template", "--source", f"workflow:{f}", "--out", str(tmp_path / "o"), "--no-progress"]
    )
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert str(f) in err and "pizza_order" in err and "'scenarios:'" in err and "'length_budget:'" in err
