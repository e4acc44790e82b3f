"""``code_version``: the version string every record carries, naming the code that produced it.

The hash covers the engine-side code (:data:`ENGINE_CODE`) and the module, or package, of the
backend that the registry (:data:`generation.backends.BACKENDS`) names for the run's backend, so a
new backend is covered by registering it, with no list to keep here.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

#: The engine-side code every record depends on (globs relative to the ``generation`` package):
#: the engine, its errors, seeds, variant pool, the built-in types (entries, planners, variants) and
#: compound plans, the backend interface, the prompts, the shared LLM code (sampling, message
#: rewrites, client, loader) and the template backend's phrase data.
ENGINE_CODE: tuple[str, ...] = (
    "engine/*.py",
    "errors.py",
    "seeds.py",
    "variants.py",
    "types/*.py",
    "types/*.yaml",
    "compound.py",
    "backends/base.py",
    "prompts/*.txt",
    "llm/*.py",
    "template_data.yaml",
)

ROOT = Path(__file__).resolve().parents[1]


def backend_code_files(backend: str) -> list[Path]:
    """The source files of ``backend`` as the registry names it: its module, or every ``.py`` file of its
    package; none for a name that is not registered (a backend object passed in by the caller).

    Args:
        backend: a backend name, as in :data:`generation.backends.BACKENDS`.

    Returns:
        The backend's source paths, sorted when it is a package; an empty list when the name is not
            registered or its module cannot be found.
    """
    from ..backends import BACKENDS

    entry = BACKENDS.get(backend)
    if entry is None:
        return []
    spec = importlib.util.find_spec(entry.target.partition(":")[0])
    if spec is None or spec.origin is None:
        return []
    if spec.submodule_search_locations:  # a package
        return sorted(p for d in spec.submodule_search_locations for p in Path(d).rglob("*.py"))
    return [Path(spec.origin)]


def code_files(backend: str = "template") -> list[Path]:
    """Every file :func:`code_version` hashes for ``backend``, in hashing order.

    Args:
        backend: the run's backend name (default ``"template"``).

    Returns:
        The files matched by :data:`ENGINE_CODE` (each glob sorted, globs in order), followed by
            :func:`backend_code_files` of ``backend``.
    """
    files = [p for pattern in ENGINE_CODE for p in sorted(ROOT.glob(pattern))]
    return files + backend_code_files(backend)


def code_version(backend: str = "template") -> str:
    """``<package version>+g<hash>``: the hash covers the engine, the variant pool, the prompts and
    the backend's code (:func:`code_files`), so a record names exactly the code that produced it.

    Args:
        backend: the run's backend name (default ``"template"``); an unregistered name hashes the
            engine code only.

    Returns:
        ``"<dialfork_dataset.__version__>+g<first 10 hex digits of SHA-256>"``, the hash taken
            over each existing file's path (relative to the ``generation`` package) and bytes.
    """
    from dialfork_dataset import __version__

    h = hashlib.sha256()
    for f in code_files(backend):
        if f.is_file():
            rel = f.relative_to(ROOT) if f.is_relative_to(ROOT) else Path(f.name)
            h.update(rel.as_posix().encode())
            h.update(f.read_bytes())
    return f"{__version__}+g{h.hexdigest()[:10]}"


__all__ = ["ENGINE_CODE", "backend_code_files", "code_files", "code_version"]
