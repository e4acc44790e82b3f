"""`.ci/cached-wheel`, which `make install` runs for llama-cpp-python (issue 51): a package pip builds
from source is built once per machine into a wheel cache outside the clone, keyed by its version, the
build flags ($CMAKE_ARGS) and the interpreter, and installed from there. Checked offline on a tiny
wheel served from a local folder, installed into a target folder (never into the test's .venv)."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / ".ci" / "cached-wheel"

pytestmark = pytest.mark.skipif(
    shutil.which("bash") is None or shutil.which("sha256sum") is None, reason="needs bash and sha256sum"
)


def _tiny_wheel(folder: Path, name: str = "dialfork_toywheel", version: str = "0.1") -> Path:
    """A valid pure-Python wheel with one module (what `pip wheel` copies from a find-links folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": "VALUE = 42\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    whl = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
    return whl


def _run(tmp_path: Path, cmake_args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(tmp_path / "dist"),
        "PIP_TARGET": str(tmp_path / "target"),  # pip install only; pip wheel has no --target
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "CMAKE_ARGS": cmake_args,
    }
    env.pop("DIALFORK_WHEEL_CACHE", None)
    return subprocess.run(
        ["bash", str(SCRIPT), sys.executable, "dialfork-toywheel", "0.1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_wheel_is_built_once_per_version_and_flags_outside_the_clone_and_installed_from_there(tmp_path):
    _tiny_wheel(tmp_path / "dist")
    first = _run(tmp_path, "-DGGML_NATIVE=OFF")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "building dialfork-toywheel 0.1 once for this machine" in first.stdout
    cache = tmp_path / "cache" / "dialfork" / "wheels"
    (folder,) = cache.glob("dialfork-toywheel-0.1-*")
    assert [p.name for p in folder.iterdir()] == ["dialfork_toywheel-0.1-py3-none-any.whl"]
    assert not list(cache.glob(".build-*"))  # the temporary build folder was renamed into place
    assert (tmp_path / "target" / "dialfork_toywheel.py").read_text() == "VALUE = 42\n"

    # the wheel is gone from the index: the second install (another clone, a fresh .venv) uses the cache
    shutil.rmtree(tmp_path / "dist")
    (tmp_path / "dist").mkdir()
    shutil.rmtree(tmp_path / "target")
    again = _run(tmp_path, "-DGGML_NATIVE=OFF")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "the wheel built before" in again.stdout and "building" not in again.stdout
    assert (tmp_path / "target" / "dialfork_toywheel.py").is_file()

    # other build flags are another build (pip's own wheel cache would reuse the first one)
    _tiny_wheel(tmp_path / "dist")
    other = _run(tmp_path, "-DGGML_NATIVE=ON")
    assert other.returncode == 0, other.stdout + other.stderr
    assert "building" in other.stdout and len(list(cache.glob("dialfork-toywheel-0.1-*"))) == 2


def test_a_failed_build_exits_nonzero_and_leaves_no_half_wheel(tmp_path):
    (tmp_path / "dist").mkdir()  # nothing to build from
    res = _run(tmp_path, "")
    assert res.returncode != 0
    cache = tmp_path / "cache" / "dialfork" / "wheels"
    assert not list(cache.glob("dialfork-toywheel-*")) and not list(cache.glob(".build-*"))
