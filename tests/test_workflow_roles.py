"""Step roles and slots declared in a workflow file (``role:``, ``collects:``, ``requires:``): parsed
into :class:`~dialfork_dataset.workflow.files.WorkflowTask`, read by :func:`dialfork_dataset.workflow.roles.derive_roles`,
and a ``requires:`` slot that no step collects is a validation error with its file, line, step and
slot. Fast: small files in ``tmp_path``, no STAR, no encoder."""

from __future__ import annotations

from pathlib import Path

from dialfork_dataset.__main__ import main as dataset_main
from dialfork_dataset.workflow.files import WorkflowCorpus, validate_workflow
from dialfork_dataset.workflow.roles import derive_roles

BANK = """\
format: dialfork-workflow/1
name: bank
tasks:
  - name: bank_balance
    request: check my balance
    length_budget: 20
    api:
      function: balance
      inputs:
        - {name: AccountNumber, type: ShortString, readable: account number}
        - {name: Pin, type: ShortString}
      required: [AccountNumber, Pin]
    steps:
      - {id: hello, say: "Hello, how can I help?", next: bank_ask_account}
      - id: bank_ask_account
        ask: AccountNumber
        say: What is your account number?
        next: bank_ask_pin
      - id: bank_ask_pin
        say: What is your PIN?
        collects: [Pin, identity_verified]
        next: query_balance
      - id: query_balance
        kind: query
        branches:
          - {outcome: available, text: Found, next: bank_tell_balance}
          - {outcome: unavailable, text: Not found, next: bank_inform_nothing_found}
      - id: bank_tell_balance
        role: [outcome, inform]
        say: Your balance is 100 dollars.
        requires: [AccountNumber, identity_verified]
        next: anything_else
      - {id: bank_inform_nothing_found, say: I cannot find that account., next: anything_else}
      - {id: anything_else, say: Anything else?}
      - {id: bank_bye, say: Goodbye!}
    scenarios:
      - {id: b01, goal: Check your balance., slots: {AccountNumber: "12345", Pin: "0000"}}
"""


def _write(tmp_path: Path, text: str, name: str = "bank.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_declared_roles_and_slots_are_parsed_and_derive_roles_returns_them(tmp_path):
    path = _write(tmp_path, BANK)
    assert validate_workflow(path) == []
    task = WorkflowCorpus(path).task("bank_balance")
    assert task.declared_roles == {"bank_tell_balance": ["outcome", "inform"]}
    assert task.declared_collects == {"bank_ask_pin": ["Pin", "identity_verified"]}
    assert task.declared_requires == {"bank_tell_balance": ["AccountNumber", "identity_verified"]}
    tr = derive_roles(task)
    tell = tr.role_of("bank_tell_balance")
    assert tell.roles == {"outcome", "inform"} and tell.declared
    assert tell.requires == ("AccountNumber", "identity_verified")
    pin = tr.role_of("bank_ask_pin")
    assert pin.collects == ("Pin", "identity_verified") and pin.has("question") and pin.declared
    assert tr.role_of("bank_ask_account").collects == ("AccountNumber",)  # from ask:
    assert tr.api_slots["Pin"] == "Pin" and tr.api_slots["AccountNumber"] == "AccountNumber"


def test_a_single_role_becomes_a_one_item_list_and_ask_counts_as_collected(tmp_path):
    text = BANK.replace("role: [outcome, inform]", "role: outcome").replace(
        "        ask: AccountNumber\n", "        ask: AccountNumber\n        collects: [customer_id]\n"
    )
    task = WorkflowCorpus(_write(tmp_path, text)).task("bank_balance")
    assert task.declared_roles == {"bank_tell_balance": ["outcome"]}
    assert task.declared_collects["bank_ask_account"] == ["AccountNumber", "customer_id"]
    assert derive_roles(task).role_of("bank_tell_balance").roles == {"outcome"}


def test_a_required_slot_that_no_step_collects_fails_validation(tmp_path):
    path = _write(
        tmp_path, BANK.replace("[AccountNumber, identity_verified]", "[AccountNumber, DateOfBirth]")
    )
    (err,) = validate_workflow(path)
    line = next(i for i, s in enumerate(path.read_text().splitlines(), 1) if "requires:" in s)
    assert err.startswith(f"{path}:{line}: tasks[0].steps[4].requires: ")
    assert "bank.yaml" in err and "'bank_tell_balance'" in err and "'DateOfBirth'" in err
    assert "identity_verified" in err  # what is collected is listed


def test_the_requires_error_is_reported_with_the_files_other_errors(tmp_path):
    text = BANK.replace("[AccountNumber, identity_verified]", "[DateOfBirth]").replace(
        "next: anything_else\n      - {id: bank_inform", "next: nowhere\n      - {id: bank_inform"
    )
    errs = validate_workflow(_write(tmp_path, text))
    assert len(errs) == 2
    assert any("tasks[0].steps[4].next" in e and "'nowhere'" in e for e in errs)
    assert any("tasks[0].steps[4].requires" in e and "'DateOfBirth'" in e for e in errs)


def test_an_unknown_role_is_a_schema_error(tmp_path):
    (err,) = validate_workflow(_write(tmp_path, BANK.replace("[outcome, inform]", "[outcome, informs]")))
    assert "tasks[0].steps[4].role[1]" in err and "'informs' is not one of" in err


def test_a_file_without_the_fields_validates_and_gets_derived_roles(tmp_path):
    text = (
        BANK.replace("        role: [outcome, inform]\n", "")
        .replace("        requires: [AccountNumber, identity_verified]\n", "")
        .replace("        collects: [Pin, identity_verified]\n", "")
    )
    path = _write(tmp_path, text)
    assert validate_workflow(path) == []
    task = WorkflowCorpus(path).task("bank_balance")
    assert task.declared_roles == task.declared_collects == task.declared_requires == {}
    tr = derive_roles(task)
    assert tr.complete, tr.problems
    assert tr.role_of("bank_ask_pin").collects == ("pin",)  # from the id
    assert tr.role_of("query_balance").roles == {"action"}
    tell = tr.role_of("bank_tell_balance")
    assert tell.has("outcome") and not tell.declared  # reached from the query through a branch
    assert tell.requires == ("AccountNumber", "pin")


def test_cli_validate_exits_2_on_the_bad_file_and_warns_on_underivable_roles(tmp_path, capsys):
    bad = _write(
        tmp_path, BANK.replace("requires: [AccountNumber, identity_verified]", "requires: [DateOfBirth]")
    )
    assert dataset_main(["workflow", "validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "'DateOfBirth'" in err and "'bank_tell_balance'" in err and "error: 1 problem(s)" in err
    # a step whose role cannot be derived: a warning, the file stays valid
    odd = _write(tmp_path, BANK.replace("bank_bye", "bank_sorry"), "odd.yaml")
    assert dataset_main(["workflow", "validate", str(odd)]) == 0
    out = capsys.readouterr()
    assert "valid (1 task(s)" in out.out
    assert "warning:" in out.err and "'bank_sorry'" in out.err and "no role" in out.err
    assert dataset_main(["workflow", "validate", str(_write(tmp_path, BANK, "good.yaml"))]) == 0
    # no role warning; the one line a one-task source gets (generation makes no WIC fork from it)
    warnings = capsys.readouterr().err.strip().splitlines()
    assert len(warnings) == 1 and "a source with one task" in warnings[0] and "no role" not in warnings[0]


def test_the_schemas_roles_are_the_roles_of_the_rule():
    from dialfork_dataset.workflow.files import workflow_schema
    from dialfork_dataset.workflow.roles import ROLES

    assert tuple(workflow_schema()["$defs"]["role"]["enum"]) == ROLES
