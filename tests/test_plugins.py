"""$DIALFORK_PLUGINS: an extension registered in every process, command-line tools included."""

from __future__ import annotations

import doctest
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dialfork_dataset import plugins
from dialfork_dataset.plugins import PluginError, load_plugins, parse_plugins

ROOT = Path(__file__).resolve().parents[1]

PLUGIN = '''
"""A third-party extension: a Task 3 detector registered on import, a source kind by register()."""
from dialfork_metrics.task3.registry import DetectorSpec
from dialfork_metrics.task3 import registry as detector_registry

NAME = "{name}"
detector_registry.register(
    DetectorSpec(NAME, "Plugin first", "baselines", "dialfork_metrics.task3.baselines.trivial:FirstTurnBaseline")
)
CALLS = []


def register():
    from dialfork_dataset.sources import SourceKind
    from dialfork_dataset import sources as source_kinds

    CALLS.append(1)
    source_kinds.register(SourceKind(NAME + "flow", "dialfork_dataset.workflow.files:WorkflowCorpus"))
'''


def _plugin(tmp_path: Path, name: str) -> Path:
    (tmp_path / f"{name}_ext.py").write_text(textwrap.dedent(PLUGIN.format(name=name)), encoding="utf-8")
    return tmp_path


def _env(tmp_path: Path, value: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, plugins.ENV: value, "HF_HUB_OFFLINE": "1"}


def test_the_doctest():
    assert doctest.testmod(plugins).failed == 0


def test_a_malformed_entry_is_named_with_the_variable():
    with pytest.raises(PluginError, match=r"DIALFORK_PLUGINS: 'bad entry', '1x' is not 'package.module'"):
        parse_plugins("ok.module, bad entry ,1x")
    assert parse_plugins(None) == [] and parse_plugins(" , ") == []


def test_a_command_line_tool_sees_a_plugins_detector_and_source_kind(tmp_path):
    """The registry of another process (the CLI) holds what the plugin registers: on import, and by
    its ``module:function`` entry."""
    folder = _plugin(tmp_path, "plugx")
    env = _env(folder, "plugx_ext,plugx_ext:register")
    out = subprocess.run(
        [sys.executable, "-m", "dialfork_metrics.task3", "predict", "--help"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "plugx" in out.stdout  # a --detector choice
    code = "import dialfork_dataset.sources as s, plugx_ext as p; print(sorted(s.SOURCE_KINDS), len(p.CALLS))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    kinds, calls = out.stdout.rsplit(" ", 1)
    assert "'plugxflow'" in kinds and calls.strip() == "1"  # register() ran once


def test_a_plugin_that_cannot_be_imported_stops_the_tool_with_a_message(tmp_path):
    env = _env(tmp_path, "no_such_plugin_xyz")
    out = subprocess.run(
        [sys.executable, "-c", "import dialfork_dataset"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert "DIALFORK_PLUGINS entry 'no_such_plugin_xyz': cannot import it" in out.stderr
    assert "remove it from DIALFORK_PLUGINS" in out.stderr


def test_in_process_each_entry_loads_once_and_a_failing_function_is_named(tmp_path, monkeypatch):
    from dialfork_dataset import sources as source_kinds
    from dialfork_dataset.sources import SOURCE_KINDS
    from dialfork_metrics.task3 import registry as detector_registry
    from dialfork_metrics.task3.registry import DETECTORS

    name = "plug" + tmp_path.name[-6:].lower().replace("_", "").replace("-", "")
    if not name.isidentifier():
        name = "plugin_in_process"
    _plugin(tmp_path, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    entries = f"{name}_ext, {name}_ext:register"
    try:
        loaded = load_plugins(entries)
        assert loaded[-2:] == [f"{name}_ext", f"{name}_ext:register"]
        assert load_plugins(entries) == loaded  # nothing twice: register() would refuse a taken name
        assert name in DETECTORS and name + "flow" in SOURCE_KINDS
        assert sys.modules[f"{name}_ext"].CALLS == [1]
        with pytest.raises(PluginError, match=rf"'{name}_ext:register': register\(\) failed \(RegistryError"):
            plugins._loaded.remove(f"{name}_ext:register")  # as if another process: the name is taken
            load_plugins(f"{name}_ext:register")
        with pytest.raises(PluginError, match="has no attribute 'nope'"):
            load_plugins(f"{name}_ext:nope")
    finally:
        for entry in (f"{name}_ext", f"{name}_ext:register"):
            if entry in plugins._loaded:
                plugins._loaded.remove(entry)
        if name in DETECTORS:
            detector_registry.unregister(name)
        if name + "flow" in SOURCE_KINDS:
            source_kinds.unregister(name + "flow")
        sys.modules.pop(f"{name}_ext", None)
