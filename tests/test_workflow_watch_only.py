"""Workflow files for watching only (issue 44, item 5): no ``scenarios`` and no ``length_budget``.

Such a file validates and opens as a source; its tasks have no scenario, say so in ``notes()`` and
``watch_only_tasks()``, and refuse ``length_budget`` in one line naming the file and what to add.
"""

from __future__ import annotations

import textwrap

import pytest

from dialfork_dataset.sources import open_source
from dialfork_dataset.workflow.files import WorkflowCorpus, WorkflowError, validate_workflow
from dialfork_dataset.workflow.roles import derive_roles

WATCH = textwrap.dedent(
    """\
    format: dialfork-workflow/1
    tasks:
      - name: shop_order_pizza
        api:
          function: OrderPizza
          inputs:
            - {name: size, type: Categorical, categories: [small, large]}
          required: [size]
        steps:
          - id: shop_ask_size
            role: question
            ask: size
            say: Which size would you like?
            next: shop_confirm_order
          - id: shop_confirm_order
            say: "One {size} pizza, is that right?"
            requires: [size]
            branches:
              - {outcome: "yes", text: "Yes", next: query_order}
          - id: query_order
            kind: query
            branches:
              - {outcome: query_success, text: Ordered, next: shop_order_succeeded}
          - id: shop_order_succeeded
            say: Your pizza is on its way.
            next: anything_else
          - id: anything_else
            say: Anything else?
          - id: goodbye
            say: Goodbye!
    """
)

PLAYED = textwrap.dedent(
    """\
    format: dialfork-workflow/1
    tasks:
      - name: shop_track_order
        length_budget: 12
        steps:
          - id: shop_ask_order_number
            role: question
            collects: [order_number]
            say: What is your order number?
            next: shop_order_status
          - id: shop_order_status
            role: outcome
            say: It is on its way.
        scenarios:
          - {id: t1, goal: Ask where your pizza is.}
      - name: shop_cancel_order
        steps:
          - id: shop_ask_order_number
            role: question
            collects: [order_number]
            say: What is your order number?
            next: shop_order_cancelled
          - id: shop_order_cancelled
            role: outcome
            say: Your order is cancelled.
        scenarios:
          - {id: c1, goal: Cancel your pizza.}
    """
)


def test_a_file_without_scenarios_or_budget_validates_and_opens(tmp_path):
    f = tmp_path / "watch.yaml"
    f.write_text(WATCH)
    assert validate_workflow(f) == []
    src = open_source(f"workflow:{f}")
    assert isinstance(src, WorkflowCorpus) and list(src.tasks) == ["shop_order_pizza"]
    assert src.scenarios == [] and src.scenarios_for("shop_order_pizza") == []
    assert src.watch_only_tasks() == ["shop_order_pizza"]
    (note,) = src.notes()
    assert str(f) in note and "no scenarios and no length_budget" in note and "generate" in note
    with pytest.raises(WorkflowError) as e:
        src.length_budget("shop_order_pizza")
    msg = str(e.value)
    assert len(msg.splitlines()) == 1 and str(f) in msg and "add 'length_budget:'" in msg
    assert src.summary()["per_task"]["shop_order_pizza"]["length_budget"] is None
    roles = derive_roles(src.task("shop_order_pizza"))
    assert roles.problems == () and roles.role_of("shop_confirm_order").requires == ("size",)
    assert "shop_ask_size" in src.task("shop_order_pizza").render_steps()


def test_a_folder_mixes_watched_and_played_tasks(tmp_path):
    (tmp_path / "a_watch.yaml").write_text(WATCH)
    (tmp_path / "b_played.yaml").write_text(PLAYED)
    assert validate_workflow(tmp_path) == []
    src = open_source(f"workflow:{tmp_path}")
    assert src.watch_only_tasks() == ["shop_order_pizza", "shop_cancel_order"]  # the last: no budget
    notes = src.notes()
    assert len(notes) == 2 and "has no length_budget:" in notes[1] and "shop_cancel_order" in notes[1]
    assert src.length_budget("shop_track_order") == 12
    assert [s.scenario_id for s in src.scenarios_for("shop_track_order")] == ["t1"]
    # the checks across files still hold: a scenario id used twice is an error
    (tmp_path / "c_clash.yaml").write_text(
        PLAYED.replace("shop_track_order", "x1").replace("shop_cancel", "x2")
    )
    assert any("duplicate scenario id 't1'" in e for e in validate_workflow(tmp_path))


def test_an_empty_scenario_list_and_a_bad_budget_are_still_errors(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text(
        WATCH.replace("  - name: shop_order_pizza\n", "  - name: shop_order_pizza\n    scenarios: []\n")
    )
    errs = validate_workflow(f)
    assert len(errs) == 1 and "tasks[0].scenarios" in errs[0]
    f.write_text(
        WATCH.replace("  - name: shop_order_pizza\n", "  - name: shop_order_pizza\n    length_budget: 2\n")
    )
    errs = validate_workflow(f)
    assert len(errs) == 1 and "tasks[0].length_budget" in errs[0]


def test_the_validate_command_accepts_a_watch_only_file(tmp_path, capsys):
    from dialfork_dataset.__main__ import main

    f = tmp_path / "watch.yaml"
    f.write_text(WATCH)
    assert main(["workflow", "validate", str(f)]) == 0
    assert "valid (1 task(s), 1 domain(s), 0 scenario(s))" in capsys.readouterr().out


def test_the_validate_command_warns_about_watch_only_tasks_and_a_one_task_source(tmp_path, capsys):
    from dialfork_dataset.__main__ import main

    f = tmp_path / "watch.yaml"
    f.write_text(WATCH)
    assert main(["workflow", "validate", str(f)]) == 0
    out = capsys.readouterr()
    assert "valid (1 task(s)" in out.out
    watch, one = out.err.strip().splitlines()
    assert watch.startswith(f"{f}: warning: task 'shop_order_pizza' has no scenarios and no length_budget: ")
    assert "not generated" in watch
    assert (
        one == f"{f}: warning: a source with one task: generation makes no fork that needs another task (WIC)"
    )
    # a folder of three tasks: a warning per task for watching only, none about the number of tasks
    (tmp_path / "both").mkdir()
    (tmp_path / "both" / "a_watch.yaml").write_text(WATCH)
    (tmp_path / "both" / "b_played.yaml").write_text(PLAYED)
    assert main(["workflow", "validate", str(tmp_path / "both")]) == 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and all(": warning: task " in x for x in lines)
    assert "'shop_cancel_order' has no length_budget:" in lines[1] and "WIC" not in "".join(lines)
    # one task that can be generated: the one-task warning alone
    played = tmp_path / "played.yaml"
    played.write_text(PLAYED[: PLAYED.index("  - name: shop_cancel_order")])
    assert main(["workflow", "validate", str(played)]) == 0
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"{played}: warning: a source with one task")


def test_the_sgd_workflows_are_watch_only_and_every_placeholder_has_values(capsys):
    """Every ``{placeholder}`` of a step's texts is a field of its task's api with values to realise
    it by (categories, examples or a range), so a turn full of values resembles its step."""
    import re
    from pathlib import Path

    import yaml

    from dialfork_dataset.__main__ import main

    folder = Path(__file__).resolve().parents[1] / "examples" / "workflows" / "sgd"
    assert main(["workflow", "validate", str(folder)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 10 and all(
        "warning: task" in x and "no scenarios and no length_budget" in x for x in err
    )
    missing = []
    for f in sorted(folder.glob("*.yaml")):
        for task in yaml.safe_load(f.read_text())["tasks"]:
            fields = {x["name"]: x for x in [*task["api"]["inputs"], *(task["api"].get("outputs") or [])]}
            for step in task["steps"]:
                for text in [step.get("say"), *(step.get("alternatives") or [])]:
                    for ph in re.findall(r"\{(\w+)\}", text or ""):
                        x = fields.get(ph)
                        if x is None or not (x.get("categories") or x.get("examples") or "max" in x):
                            missing.append(f"{f.name}: {step['id']}: {{{ph}}}")
                        elif x.get("examples"):
                            assert len(x["examples"]) >= 4 and all(str(v).strip() for v in x["examples"]), ph
    assert missing == []
