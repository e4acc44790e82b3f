"""GGUF models: locating, validating and caching (generation.llm.gguf), on small GGUF files written
here with the ``gguf`` package (no model download); the real packaged model is
tests/test_real_llm.py's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")

from generation.llm import gguf as G  # noqa: E402
from generation.llm.loader import ModelLoadError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHATML = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"


def write_gguf(
    path: Path, *, arch: str = "llama", types: tuple[str, ...] = ("F32",), chat_template: str | None = CHATML
) -> Path:
    """A header-valid GGUF file: one 32-element tensor per entry of ``types`` (raw bytes for
    quantised types), ``general.architecture`` and optionally a chat template."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("tiny-test")
    if chat_template is not None:
        w.add_chat_template(chat_template)
    for i, name in enumerate(types):
        qt = gguf.GGMLQuantizationType[name]
        block, nbytes = gguf.GGML_QUANT_SIZES[qt]
        if name == "F32":
            w.add_tensor(f"t{i}.weight", np.zeros(32, dtype=np.float32))
        else:
            w.add_tensor(f"t{i}.weight", np.zeros(32 // block * nbytes, dtype=np.uint8), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_supported_types_cover_common_quantisations():
    s = set(G.supported_tensor_types())
    assert {"F32", "F16", "Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q6_K"} <= s
    # types the gguf package has no dequantiser for are not claimed
    assert "Q8_1" not in s and "Q8_K" not in s


def test_inspect_reads_a_valid_header(tmp_path):
    p = write_gguf(tmp_path / "ok.gguf", types=("F32", "Q4_1", "Q4_1", "Q8_0"))
    info = G.inspect_gguf(p)
    assert info.architecture == "llama"
    assert info.tensor_types == {"F32": 1, "Q4_1": 2, "Q8_0": 1}
    assert info.has_chat_template and info.name == "tiny-test"


def test_unsupported_quantisation_names_file_types_and_supported_ones(tmp_path):
    p = write_gguf(tmp_path / "odd.gguf", types=("F32", "Q8_1", "Q8_1"))
    with pytest.raises(ModelLoadError) as e:
        G.inspect_gguf(p)
    msg = str(e.value)
    assert str(p) in msg and "Q8_1 (2 tensors)" in msg
    assert "supported:" in msg and "Q4_K" in msg and "Q8_0" in msg


def test_unsupported_architecture_and_missing_template_are_both_reported(tmp_path):
    p = write_gguf(tmp_path / "arch.gguf", arch="no_such_arch", chat_template=None)
    with pytest.raises(ModelLoadError) as e:
        G.inspect_gguf(p)
    assert len(e.value.errors) == 2
    assert "'no_such_arch' is not one transformers reads" in str(e.value) and "llama" in str(e.value)
    assert "no chat template" in str(e.value)


def test_not_a_gguf_file(tmp_path):
    p = tmp_path / "fake.gguf"
    p.write_bytes(b"PK\x03\x04 this is a zip file, not a model" * 10)
    with pytest.raises(ModelLoadError, match=r"fake\.gguf: not a readable GGUF file"):
        G.inspect_gguf(p)


def test_missing_file_lists_the_folders_gguf_files(tmp_path):
    write_gguf(tmp_path / "model.Q4_K_M.gguf")
    write_gguf(tmp_path / "model.Q8_0.gguf")
    with pytest.raises(ModelLoadError) as e:
        G.locate_gguf(str(tmp_path), "model.Q5_K_M.gguf")
    assert "'model.Q5_K_M.gguf' not found in" in str(e.value)
    assert "GGUF files there: model.Q4_K_M.gguf, model.Q8_0.gguf" in str(e.value)
    with pytest.raises(ModelLoadError, match="no .gguf file there"):
        G.locate_gguf(str(tmp_path / "nothere" / "x.gguf"))
    with pytest.raises(ModelLoadError, match="no such folder"):
        G.locate_gguf(str(tmp_path / "nothere"), "x.gguf")


def test_locate_forms(tmp_path):
    p = write_gguf(tmp_path / "m.gguf")
    assert G.locate_gguf(str(tmp_path), "m.gguf") == p.resolve()
    assert G.locate_gguf(str(p)) == p.resolve()
    assert G.locate_gguf(str(tmp_path), str(p)) == p.resolve()  # an absolute --gguf-file
    assert G.locate_gguf("Qwen/Qwen2.5-7B-Instruct") is None  # an ordinary model
    assert G.locate_gguf(str(tmp_path)) is None


def test_registry_names_an_uninstalled_package_and_the_fix(monkeypatch):
    monkeypatch.setitem(
        G.REGISTRY, "nomodel", G.RegisteredModel("dialfork-no-such-dist", "x", "x.gguf", "a test")
    )
    with pytest.raises(ModelLoadError) as e:
        G.locate_gguf("nomodel")
    assert "dialfork-no-such-dist" in str(e.value) and G.INSTALL_HINT in str(e.value)
    with pytest.raises(ModelLoadError, match="not a registered GGUF model"):
        G.registry_path("nomodel2")


def test_cache_key_follows_file_dtype_and_content(tmp_path):
    import torch

    p = write_gguf(tmp_path / "m.gguf")
    k = G.cache_key(p, torch.float32)
    assert k.startswith("m-float32-") and k == G.cache_key(p, torch.float32)
    assert G.cache_key(p, torch.bfloat16) != k
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert G.cache_key(p, torch.float32) != k


def test_materialise_refuses_bad_files_and_writes_nothing(tmp_path):
    p = write_gguf(tmp_path / "odd.gguf", types=("Q8_1",))
    cache = tmp_path / "cache"
    with pytest.raises(ModelLoadError, match="Q8_1"):
        G.materialise(p, dtype="float32", device="cpu", cache_dir=cache)
    assert [x.name for x in cache.iterdir() if not x.name.endswith(".lock")] == []


def test_materialise_returns_a_finished_folder_without_converting(tmp_path, monkeypatch):
    import torch

    p = write_gguf(tmp_path / "m.gguf")
    cache = tmp_path / "cache"
    done = cache / G.cache_key(p, torch.float32)
    done.mkdir(parents=True)
    (done / G.INFO_FILE).write_text("{}")
    monkeypatch.setattr(G, "_convert", lambda *a: pytest.fail("converted again"))
    assert G.materialise(p, dtype="float32", device="cpu", cache_dir=cache) == done


def test_interrupted_conversion_leaves_no_finished_folder(tmp_path, monkeypatch):
    p = write_gguf(tmp_path / "m.gguf")
    cache = tmp_path / "cache"

    def boom(info, dtype, dest):
        dest.mkdir(parents=True)
        (dest / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(G, "_convert", boom)
    with pytest.raises(KeyboardInterrupt):
        G.materialise(p, dtype="float32", device="cpu", cache_dir=cache)
    assert [x.name for x in cache.iterdir() if not x.name.endswith(".lock")] == []


def _run_generation(args, tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
        "DIALFORK_GGUF_CACHE": str(tmp_path / "cache"),
        "HF_HUB_OFFLINE": "1",
    }
    return subprocess.run(
        [sys.executable, "-m", "generation", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )


@pytest.mark.parametrize("case", ["missing", "unsupported"])
def test_generation_cli_bad_gguf_names_the_file_and_leaves_no_output(tmp_path, star_dir, case):
    folder = tmp_path / "models"
    folder.mkdir()
    write_gguf(folder / "tiny.Q8_1.gguf", types=("Q8_1",))
    name = "tiny.Q4_K_M.gguf" if case == "missing" else "tiny.Q8_1.gguf"
    out = tmp_path / "out"
    r = _run_generation(
        [
            "--backend",
            "transformers",
            "--model",
            str(folder),
            "--gguf-file",
            name,
            "--star",
            str(star_dir),
            "--tasks",
            "weather",
            "--per-task",
            "1",
            "--out",
            str(out),
        ],
        tmp_path,
    )
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert name in r.stderr
    if case == "missing":
        assert "GGUF files there: tiny.Q8_1.gguf" in r.stderr
    else:
        assert "Q8_1" in r.stderr and "supported:" in r.stderr
    assert not out.exists()
