"""Output people can read (issue 14, section 7): the CLIs share one console set-up (-v/-q, logs
through tqdm.write, usage names, help that states defaults); per-unit INFO lines become one
summary line per stage; the CLI consistency items."""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dialfork_dataset.console import console, prog_name, progress_disabled
from dialfork_dataset.taxonomy import forks_per_source

ROOT = Path(__file__).resolve().parents[1]


def _parsers() -> dict[str, argparse.ArgumentParser]:
    from dialfork_dataset.__main__ import build_parser as dataset
    from dialfork_dataset.star import build_parser as star
    from dialfork_metrics.bench import build_parser as bench
    from dialfork_metrics.task3.__main__ import _build_parser as task3
    from generation.cli import build_parser as generation
    from leaderboard.__main__ import build_parser as leaderboard

    return {
        "dialfork-dataset": dataset(),
        "dialfork-generate": generation(),
        "dialfork-bench": bench(),
        "dialfork-task3": task3(),
        "dialfork-leaderboard": leaderboard(),
        "star": star(),
    }


def _walk(parser: argparse.ArgumentParser, path: str):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, f"{path} {name}")
        else:
            yield path, action


def test_every_option_states_its_default():
    missing = []
    for name, parser in _parsers().items():
        for path, action in _walk(parser, name):
            if not action.option_strings or action.required or isinstance(action, argparse._HelpAction):
                continue
            if action.help == argparse.SUPPRESS:  # not shown (task3 predict --api-key: refused, issue 31)
                continue
            if "default" not in (action.help or "").lower():
                missing.append(f"{path} {action.option_strings[0]}")
    assert not missing, missing


def test_help_examples_are_one_command_a_line():
    """Each example of a --help text is on its own line; a long one continues with `\\` on the next,
    indented line (issue 37: two commands of `python -m generation --help` ran together)."""
    from dialfork_metrics.audit.__main__ import build_parser as audit
    from dialfork_metrics.guard.__main__ import _build_parser as guard

    texts = {name: p.format_help() for name, p in {**_parsers(), "audit": audit(), "guard": guard()}.items()}
    for name, text in texts.items():
        lines = text.splitlines()
        for i, line in enumerate(lines):
            assert line.count("python -m ") <= 1, (name, line)
            if line.rstrip().endswith("\\"):
                nxt = lines[i + 1]
                assert nxt.startswith("  ") and "python -m " not in nxt, (name, line, nxt)
    gen = texts["dialfork-generate"].splitlines()
    hidden = next(i for i, line in enumerate(gen) if "--split hidden" in line)
    assert gen[hidden].endswith("--split hidden \\") and gen[hidden + 1].strip().startswith(
        "--backend openai"
    )


def test_every_cli_has_verbose_and_quiet():
    for name, parser in _parsers().items():
        opts = {o for a in parser._actions for o in a.option_strings}
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not {"-q", "-v"} <= opts:  # per sub-command (task3)
            for sp in subs:
                for sub in sp.choices.values():
                    sopts = {o for a in sub._actions for o in a.option_strings}
                    assert {"-q", "--quiet", "-v", "--verbose"} <= sopts, (name, sub.prog)
        else:
            assert {"--quiet", "--verbose"} <= opts, name


@pytest.mark.parametrize(
    "script, module",
    [
        ("dialfork-dataset", "dialfork_dataset"),
        ("dialfork-generate", "generation"),
        ("dialfork-bench", "dialfork_metrics.bench"),
        ("dialfork-task3", "dialfork_metrics.task3"),
        ("dialfork-leaderboard", "leaderboard"),
    ],
)
def test_console_scripts_print_their_own_names(monkeypatch, script, module):
    monkeypatch.setattr(sys, "argv", [f"/usr/local/bin/{script}", "--help"])
    assert prog_name(module) == script
    parser = _parsers()[script]
    assert parser.format_usage().startswith(f"usage: {script} ")
    monkeypatch.setattr(sys, "argv", ["/x/__main__.py"])
    assert prog_name(module) == f"python -m {module}"


def test_console_routes_logs_through_tqdm_and_restores_state(monkeypatch):
    from tqdm.contrib.logging import _TqdmLoggingHandler

    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    with console(verbose=False, quiet=False):
        assert any(isinstance(h, _TqdmLoggingHandler) for h in root.handlers)
        assert root.level == logging.INFO and not progress_disabled()
    with console(verbose=True, default=logging.WARNING):
        assert root.level == logging.INFO  # -v: one step more than the CLI's default
    with console(quiet=True):
        assert root.level == logging.ERROR and progress_disabled() and os.environ["TQDM_DISABLE"] == "1"
    assert (list(root.handlers), root.level) == before
    assert "TQDM_DISABLE" not in os.environ and not progress_disabled()


def _run(args: list[str], env_extra: dict | None = None, **kw) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
        **(env_extra or {}),
    }
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=300, **kw)


def test_quiet_silences_logs_and_bars_and_star_env_is_read(tmp_path, star_dir):
    args = ["-m", "generation", "--tasks", "weather", "--per-task", "1"]
    loud = _run([*args, "--star", str(star_dir), "--out", str(tmp_path / "a")])
    assert loud.returncode == 0, loud.stderr
    assert "INFO generation" in loud.stderr and "generate[0]" in loud.stderr  # a log line and the bar
    quiet = _run([*args, "-q", "--out", str(tmp_path / "b")], {"DIALFORK_STAR_DIR": str(star_dir)})
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr  # $DIALFORK_STAR_DIR, no --star
    assert f"{1 + forks_per_source()} records" in quiet.stdout  # D+ and its forks
    assert (tmp_path / "a" / "weather.jsonl").read_bytes() == (tmp_path / "b" / "weather.jsonl").read_bytes()
    env = {k: v for k, v in os.environ.items() if k != "DIALFORK_STAR_DIR"}
    missing = subprocess.run(
        [sys.executable, *args, "--out", str(tmp_path / "c")],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))},
        timeout=300,
    )
    assert missing.returncode == 2 and "--star PATH, or set DIALFORK_STAR_DIR" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_star_module_runs_without_runpy_warning(star_dir):
    r = _run(
        [
            "-W",
            "error::RuntimeWarning",
            "-m",
            "dialfork_dataset.star",
            "steps",
            "weather",
            "--path",
            str(star_dir),
        ]
    )
    assert r.returncode == 0 and "RuntimeWarning" not in r.stderr, r.stderr
    assert r.stdout.startswith("1. ")


def test_leaderboard_render_of_a_missing_results_folder_fails(tmp_path, capsys):
    from leaderboard.__main__ import main

    assert main(["render", "--results", str(tmp_path / "nope"), "--out", str(tmp_path / "site")]) == 2
    assert "no such folder" in capsys.readouterr().err
    assert not (tmp_path / "site").exists()


def test_leaderboard_validate_blind_accepts_a_hub_id(template_hub, monkeypatch, capsys):
    """`--blind org/name` loads the blind sets through datasets (the Hub download itself is
    replaced by the local layout: tests have no network)."""
    import dialfork_dataset.hub as hub
    from leaderboard.__main__ import _blind_set, main
    from leaderboard.validate import BlindSet

    dest, _ = template_hub
    real = hub.load_split
    seen = []

    def from_local(data, config, split=None, **kw):
        seen.append((data, config))
        return real(str(dest), config, split=split, **kw)

    monkeypatch.setattr(hub, "load_split", from_local)
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):  # as online: the id goes to load_split (mocked)
        monkeypatch.setenv(var, "0")
    got = _blind_set("idiap/dialfork")
    want = BlindSet.from_dir(dest)
    assert got.turns == want.turns and got.pairs == want.pairs and got.revision() == want.revision()
    assert seen == [("idiap/dialfork", "blind"), ("idiap/dialfork", "blind_task2")]
    monkeypatch.setattr(hub, "load_split", real)
    # offline, an unknown id is a usage error with a message, not a traceback
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["validate", "sub.jsonl", "--blind", "nobody/nothing", "--no-metadata"]) == 2
    err = capsys.readouterr().err
    assert (
        "--blind nobody/nothing: no local folder of that name, and as a Hub dataset id it cannot be loaded: "
        "the Hub is offline (HF_HUB_OFFLINE=1)"
    ) in err


def test_per_unit_info_lines_become_one_summary_per_stage(caplog):
    from dialfork_metrics.bench.common import _summarised

    setlevel = logging.getLogger("dialfork_metrics.setlevel")
    with caplog.at_level(logging.INFO):
        with _summarised("Task 1 (48 units)"):
            for _ in range(48):
                setlevel.info("PRD: %d reference vs %d target embeddings (unbalanced sets bias ...)", 20, 30)
                setlevel.info("FBD = %.6g (n_ref=%d, n_tgt=%d pairs, d=%d)", 1.0, 20, 30, 384)
            setlevel.warning("something else")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "something else",
        "Task 1 (48 units): 48 PRD comparisons of unbalanced sets (reference and target sizes differ: "
        "the clustering leans towards the larger set); 48 FBD values",
    ]
    setlevel.info("PRD: 1 reference vs 2 target embeddings (unbalanced sets bias ...)")  # filter removed
