"""Finding a local STAR copy (:func:`resolve_star`) and downloading the public one (:func:`download_star`)."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

from ..console import progress_disabled
from .common import DEFAULT_STAR_URL, STAR_COMMIT, STAR_ENV, StarError, is_star_dir

log = logging.getLogger(__name__)


def resolve_star(path: str | os.PathLike | None = None) -> Path:
    """The STAR folder to use: ``path`` if given, else ``$DIALFORK_STAR_DIR``. The folder must hold a
    STAR copy (``tasks/`` and ``apis/``).

    Args:
        path: A STAR folder (``~`` expanded); None reads ``$DIALFORK_STAR_DIR``.

    Returns:
        Path: The resolved absolute folder.

    Raises:
        StarError: ``path`` is None and ``$DIALFORK_STAR_DIR`` is unset or empty, or the folder
            lacks ``tasks/`` or ``apis/`` (the message says how to get a copy).
    """
    if path is None:
        env = os.environ.get(STAR_ENV)
        if not env:
            raise StarError(
                f"no STAR folder given and ${STAR_ENV} is not set. Either pass the path of a STAR copy, "
                f"set {STAR_ENV}=/path/to/star, or download it (network needed) with\n"
                "  python -c 'from dialfork_dataset.star import download_star; download_star(\"star\")'\n"
                f"which fetches RasaHQ/STAR at commit {STAR_COMMIT[:12]} from GitHub."
            )
        path, origin = env, f"${STAR_ENV}"
    else:
        origin = "the given path"
    p = Path(path).expanduser().resolve()
    if not is_star_dir(p):
        raise StarError(
            f"{p} ({origin}) is not a STAR copy: it needs tasks/ and apis/ folders. Download one "
            "with dialfork_dataset.star.download_star(dest)."
        )
    return p


def _find_star_root(folder: Path) -> Path | None:
    if is_star_dir(folder):
        return folder
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        if is_star_dir(sub):
            return sub
    return None


def download_star(
    dest: str | os.PathLike,
    url: str = DEFAULT_STAR_URL,
    *,
    force: bool = False,
    timeout: float = 60.0,
    progress: bool | None = None,
) -> Path:
    """Download and extract the public STAR repository (a zip archive, GitHub's archive of RasaHQ/STAR
    at commit :data:`STAR_COMMIT` by default) into ``dest`` and return ``dest``.

    If ``dest`` already holds a STAR copy nothing is downloaded (``force=True`` replaces it). The
    archive goes to a temporary file beside ``dest``, is extracted to a temporary folder, checked
    (``tasks/`` and ``apis/`` present, and ``dialogues/`` or ``scenarios.jsonl``), then renamed into
    place, so an interrupted download never leaves a half-written ``dest``. ``progress`` shows a tqdm
    bar (None: only on a terminal).

    Args:
        dest: The folder to extract STAR into (``~`` expanded); it must be new, empty, or already a
            STAR copy.
        url: The zip archive to download; default :data:`DEFAULT_STAR_URL` (GitHub's archive of
            RasaHQ/STAR at :data:`STAR_COMMIT`).
        force: Replace a STAR copy already in ``dest``.
        timeout: The network timeout of the request, in seconds.
        progress: Show a tqdm download bar: True always, False never, None only on a terminal
            (never when progress bars are disabled project-wide).

    Returns:
        Path: The resolved ``dest``.

    Raises:
        StarError: ``dest`` exists, is not empty and is not a STAR copy; the download fails (HTTP
            error, network or file error); the file is not a zip archive or holds an unsafe path
            (absolute or with ``..``); or the archive holds no STAR copy (no folder with
            ``tasks/`` and ``apis/``, or neither ``dialogues/`` nor ``scenarios.jsonl``).
    """
    import urllib.error
    import urllib.request

    from tqdm.auto import tqdm

    dest = Path(dest).expanduser().resolve()
    if is_star_dir(dest) and not force:
        log.info("%s already holds a STAR copy; nothing downloaded", dest)
        return dest
    if dest.exists() and not is_star_dir(dest) and (not dest.is_dir() or any(dest.iterdir())):
        raise StarError(f"{dest} exists and is not a STAR copy; give an empty or new folder")
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".star-download-", dir=dest.parent))
    try:
        archive = work / "star.zip"
        log.info("downloading STAR from %s", url)
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp, archive.open("wb") as out:
                total = int(resp.headers.get("Content-Length") or 0) or None
                with tqdm(
                    total=total,
                    unit="B",
                    unit_scale=True,
                    desc="STAR download",
                    disable=True if progress_disabled() else None if progress is None else not progress,
                ) as bar:
                    while chunk := resp.read(1 << 20):
                        out.write(chunk)
                        bar.update(len(chunk))
        except urllib.error.HTTPError as e:
            raise StarError(
                f"downloading STAR from {url} failed: HTTP {e.code} {e.reason}. Check the URL "
                "(default: the GitHub archive of RasaHQ/STAR) or download it by hand and pass "
                "its folder."
            ) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise StarError(
                f"downloading STAR from {url} failed: {reason}. Check the network, or download "
                "the archive by hand, extract it and pass its folder."
            ) from None
        extract = work / "extract"
        try:
            with zipfile.ZipFile(archive) as zf:
                for member in zf.namelist():
                    if member.startswith("/") or ".." in Path(member).parts:
                        raise StarError(f"{url}: unsafe path {member!r} in the archive; not extracting")
                zf.extractall(extract)
        except zipfile.BadZipFile:
            raise StarError(f"{url}: the download is not a zip archive") from None
        root = _find_star_root(extract)
        if root is None:
            raise StarError(f"{url}: the archive holds no STAR copy (no folder with tasks/ and apis/)")
        if not ((root / "dialogues").is_dir() or (root / "scenarios.jsonl").is_file()):
            raise StarError(f"{url}: the archive's STAR copy has neither dialogues/ nor scenarios.jsonl")
        old = None
        if dest.exists():
            old = work / "old"
            dest.rename(old)
        root.rename(dest)
        log.info("STAR extracted to %s", dest)
        return dest
    finally:
        shutil.rmtree(work, ignore_errors=True)
