"""Results stores: a local folder, or a Hub dataset repo through ``huggingface_hub``.

A result is one immutable JSON file per submission at
``results/<submitter>/<method-slug>/<timestamp>.json`` (public: scores of the public part,
metadata without private fields). Its private twin, ``private/<same key>`` (scores of the
private part, the contact), goes to a private area: ``<root>/private`` for a
:class:`LocalStore`, a second (private) dataset repo for a :class:`HubStore`. Nothing is ever
overwritten: a local write is a temp file hard-linked into place (``os.link`` fails if the
name exists, so concurrent writers cannot clobber each other); a Hub write is a commit with
``parent_commit`` set to the revision that was checked, so a concurrent commit makes it fail
and it is retried against the new head. A submitter only ever writes under their own folder.

Rate limit: at most ``max_per_day`` results per submitter per UTC day, counted from the
store's own listing (so it survives restarts); the clock is injectable for tests. The count
and the write happen under one per-submitter lock (threads, and for a local store other
processes too through a file lock), so concurrent submissions cannot exceed the limit.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import threading
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from dialfork_dataset.atomic import atomic_path, make_public

logger = logging.getLogger(__name__)

RESULTS_AREA = "results"
PRIVATE_AREA = "private"
#: Default number of results one submitter may store per UTC day.
DEFAULT_MAX_PER_DAY = 5
TIMESTAMP_FORMAT = "%Y%m%dT%H%M%S.%fZ"
SUBMITTER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # always used with fullmatch
_KEY_RE = re.compile(
    r"([A-Za-z0-9][A-Za-z0-9._-]{0,63})/([a-z0-9][a-z0-9._-]{0,63})/(\d{8}T\d{6}\.\d{6}Z)\.json"
)


class ResultExistsError(FileExistsError):
    """A result file of that name already exists; results are write-once."""


class RateLimitError(RuntimeError):
    """The submitter reached the daily limit."""


def utcnow() -> datetime:
    """The current time, timezone-aware, in UTC (a store's default clock).

    Returns:
        ``datetime.now(timezone.utc)``.
    """
    return datetime.now(timezone.utc)


def slugify(name: str) -> str:
    """File-name-safe slug of a method name (lowercase ASCII, digits, ``.``, ``_``, ``-``).

    Args:
        name: The method's name.

    Returns:
        At most 64 characters: accents dropped, every other run of characters replaced by
        ``-``, leading and trailing ``-._`` stripped; ``"method"`` when nothing is left.
    """
    s = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    s = re.sub(r"[^a-z0-9._-]+", "-", s.lower()).strip("-._")
    return (s or "method")[:64]


class InvalidSubmitterError(ValueError):
    """A submitter id that cannot name a results folder."""


def check_submitter(submitter: str) -> str:
    """``submitter`` if it is a valid id (a *full* match: ``"alice\\n"`` is refused, where
    ``re.match`` with ``$`` would accept it), else :class:`InvalidSubmitterError`.

    Args:
        submitter: The submitter's id: 1-64 letters, digits, ``.``, ``_`` or ``-``, starting
            with a letter or digit.

    Returns:
        ``submitter``, unchanged.

    Raises:
        InvalidSubmitterError: ``submitter`` is not a string or not a valid id.
    """
    if not isinstance(submitter, str) or not SUBMITTER_RE.fullmatch(submitter):
        shown = (
            repr(submitter[:70] + ("..." if len(submitter) > 70 else ""))
            if isinstance(submitter, str)
            else type(submitter).__name__
        )
        raise InvalidSubmitterError(
            f"submitter {shown} is not a valid id: 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit, and nothing else (no spaces or newlines)"
        )
    return submitter


def result_key(submitter: str, method: str, when: datetime) -> str:
    """``<submitter>/<method-slug>/<UTC timestamp>.json`` (the same key in both areas).

    Args:
        submitter: The submitter's id.
        method: The method's name (slugged with :func:`slugify`).
        when: The submission time; must carry a time zone.

    Returns:
        The key; the timestamp has microseconds (``%Y%m%dT%H%M%S.%fZ``).

    Raises:
        InvalidSubmitterError: ``submitter`` is not a valid id.
        ValueError: ``when`` is naive (no time zone).
    """
    check_submitter(submitter)
    if when.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware (UTC)")
    ts = when.astimezone(timezone.utc).strftime(TIMESTAMP_FORMAT)
    return f"{submitter}/{slugify(method)}/{ts}.json"


def parse_key(key: str) -> tuple[str, str, datetime] | None:
    """The parts of a result key made by :func:`result_key`.

    Args:
        key: A key such as ``alice/my-method/20250101T120000.000000Z.json``.

    Returns:
        ``(submitter, method slug, UTC time)``, or None when ``key`` is not shaped like a key.
    """
    m = _KEY_RE.fullmatch(key)
    if not m:
        return None
    when = datetime.strptime(m.group(3), TIMESTAMP_FORMAT).replace(tzinfo=timezone.utc)
    return m.group(1), m.group(2), when


def _dumps(obj: Any) -> bytes:
    return (json.dumps(obj, ensure_ascii=False, indent=2, sort_keys=False, allow_nan=False) + "\n").encode(
        "utf-8"
    )


class ResultStore:
    """Common logic; subclasses implement ``_keys``, ``_read`` and ``_write_new``."""

    max_per_day: int = DEFAULT_MAX_PER_DAY
    clock: Callable[[], datetime] = staticmethod(utcnow)

    # -- backend
    def _keys(self, area: str) -> list[str]:
        raise NotImplementedError

    def _read(self, area: str, key: str) -> bytes:
        raise NotImplementedError

    def _write_new(self, area: str, key: str, data: bytes) -> None:
        raise NotImplementedError

    # -- API
    def keys(self, area: str = RESULTS_AREA, submitter: str | None = None) -> list[str]:
        """The result keys stored in ``area``.

        Args:
            area: ``"results"`` (public) or ``"private"`` (the private twins).
            submitter: Only this submitter's keys; None: everyone's.

        Returns:
            The keys ``<submitter>/<method-slug>/<timestamp>.json``, sorted; files whose names
            are not keys are ignored.

        Raises:
            ValueError: ``area`` is unknown.
        """
        out = []
        for k in self._keys(area):
            p = parse_key(k)
            if p is None:
                continue
            if submitter is None or p[0] == submitter:
                out.append(k)
        return sorted(out)

    def read(self, key: str, area: str = RESULTS_AREA) -> dict[str, Any]:
        """One stored result.

        Args:
            key: Its key (see :meth:`keys`).
            area: ``"results"`` or ``"private"``.

        Returns:
            The parsed result JSON.

        Raises:
            ValueError: ``area`` is unknown.
        """
        return json.loads(self._read(area, key).decode("utf-8"))

    def results(self, area: str = RESULTS_AREA) -> list[dict[str, Any]]:
        """Every stored result of ``area`` (``results`` or ``private``), oldest key first.

        Args:
            area: ``"results"`` or ``"private"``.

        Returns:
            The parsed result JSON objects, in key order.
        """
        return [self.read(k, area) for k in self.keys(area)]

    def count_today(self, submitter: str, now: datetime | None = None) -> int:
        """How many public results ``submitter`` stored on the current UTC day.

        Args:
            submitter: The submitter id.
            now: The current time (timezone-aware); None: the store's clock.

        Returns:
            The number of their result keys timestamped on that UTC day.
        """
        now = now or self.clock()
        start = now.astimezone(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
        n = 0
        for k in self.keys(RESULTS_AREA, submitter=submitter):
            when = parse_key(k)[2]  # type: ignore[index]
            if start <= when < start + timedelta(days=1):
                n += 1
        return n

    def check_rate_limit(self, submitter: str, now: datetime | None = None) -> int:
        """Raise :class:`RateLimitError` if ``submitter`` used up today's quota; else return the
        number of results they may still store today.

        Args:
            submitter: The submitter id.
            now: The current time (timezone-aware); None: the store's clock.

        Returns:
            ``max_per_day`` minus the results stored today (>= 1).

        Raises:
            InvalidSubmitterError: ``submitter`` is not a valid id.
            RateLimitError: They already stored ``max_per_day`` results today.
        """
        check_submitter(submitter)
        now = now or self.clock()
        used = self.count_today(submitter, now)
        if used >= self.max_per_day:
            tomorrow = (now.astimezone(timezone.utc) + timedelta(days=1)).strftime("%Y-%m-%d")
            raise RateLimitError(
                f"submitter {submitter!r} already stored {used} result(s) today (limit "
                f"{self.max_per_day} per UTC day); try again from {tomorrow} 00:00 UTC"
            )
        return self.max_per_day - used

    @contextmanager
    def submitter_lock(self, submitter: str) -> Iterator[None]:
        """Held while a submitter's quota is counted and their result written, so that
        concurrent submissions cannot both pass the count. In-process: one lock per submitter
        (the Space's worker threads); :class:`LocalStore` adds a file lock (other processes).

        Args:
            submitter: The submitter id.

        Yields:
            Nothing; the lock is held inside the ``with`` block.
        """
        locks: dict[str, threading.Lock] = self.__dict__.setdefault(
            "_submitter_locks", {}
        )  # atomic setdefault
        with locks.setdefault(submitter, threading.Lock()):
            yield

    def same_submission(self, submitter: str, public: Mapping[str, Any]) -> str | None:
        """The key of a result ``submitter`` stored from the same submission file: the same
        ``submission.sha256``, track and gold revision as ``public``.

        Args:
            submitter: The submitter id.
            public: A public result about to be stored.

        Returns:
            The stored result's key, or None (also when ``public`` names no sha256).
        """
        sha = (public.get("submission") or {}).get("sha256")
        if not sha:
            return None
        for key in self.keys(RESULTS_AREA, submitter=submitter):
            try:
                other = json.loads(self._read(RESULTS_AREA, key))
            except (OSError, ValueError):
                continue
            if (
                isinstance(other, Mapping)
                and (other.get("submission") or {}).get("sha256") == sha
                and other.get("track") == public.get("track")
                and other.get("gold_revision") == public.get("gold_revision")
            ):
                return key
        return None

    def put(
        self,
        submitter: str,
        method: str,
        public: Mapping[str, Any],
        private: Mapping[str, Any] | None = None,
        now: datetime | None = None,
    ) -> str:
        """Store a new result (and its private twin); returns its key. Checks the rate limit and
        writes under :meth:`submitter_lock` (a check and a write are one step), refuses to
        overwrite anything (:class:`ResultExistsError`).

        Args:
            submitter: The submitter id (1-64 letters, digits, ``.``, ``_``, ``-``).
            method: The method's name (slugified into the key).
            public: The public result (written to the ``results`` area).
            private: Its private twin (written first, to the private area), or None.
            now: The submission time (timezone-aware); None: the store's clock.

        Returns:
            The new result's key, ``<submitter>/<method-slug>/<timestamp>.json``.

        Raises:
            InvalidSubmitterError: ``submitter`` is not a valid id.
            RateLimitError: The submitter reached the daily limit.
            ResultExistsError: A result with that key already exists, or ``submitter`` already
                stored a result of the same submission file (its sha256) on the same track and gold
                revision (the page would show one file twice).
            ValueError: ``now`` is not timezone-aware, or a result is not JSON-serialisable
                (NaN included).
        """
        check_submitter(submitter)
        with self.submitter_lock(submitter):
            now = now or self.clock()
            self.check_rate_limit(submitter, now)
            same = self.same_submission(submitter, public)
            if same is not None:
                sha = str((public.get("submission") or {}).get("sha256"))
                raise ResultExistsError(
                    f"result exists: this submission file (sha256 {sha[:12]}) was already scored on the "
                    f"{public.get('track')} track against the same gold, stored as {same}; a file is scored "
                    "once (the page would show it twice): submit changed predictions to get a new result"
                )
            key = result_key(submitter, method, now)
            if key in set(self._keys(RESULTS_AREA)):
                raise ResultExistsError(f"result {key} already exists; results are immutable")
            pub = _dumps(public)
            if private is not None:
                self._write_new(PRIVATE_AREA, key, _dumps(private))
            self._write_new(RESULTS_AREA, key, pub)
        logger.info("stored result %s", key)
        return key


class LocalStore(ResultStore):
    """Results under ``root/results``, private twins under ``private_root`` (default ``root/private``).

    Args:
        root: The store's folder (created on the first write).
        private_root: Folder of the private twins; None: ``root/private``.
        max_per_day: Results one submitter may store per UTC day.
        clock: Returns the current time (timezone-aware); None: UTC now. Tests inject one.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        *,
        private_root: str | os.PathLike | None = None,
        max_per_day: int = DEFAULT_MAX_PER_DAY,
        clock: Callable[[], datetime] | None = None,
    ):
        self.root = Path(root)
        self.private_root = Path(private_root) if private_root is not None else self.root / PRIVATE_AREA
        self.max_per_day = int(max_per_day)
        if clock is not None:
            self.clock = clock

    @contextmanager
    def submitter_lock(self, submitter: str) -> Iterator[None]:
        """The in-process lock, then an OS file lock ``root/.locks/<submitter>.lock`` that also
        serialises other processes writing to the same folder (``filelock``).

        Args:
            submitter: The submitter id (names the lock file).

        Yields:
            Nothing; both locks are held inside the ``with`` block.
        """
        from filelock import FileLock

        with super().submitter_lock(submitter):
            d = self.root / ".locks"
            d.mkdir(parents=True, exist_ok=True)
            with FileLock(str(d / f"{submitter}.lock")):
                yield

    def _dir(self, area: str) -> Path:
        if area == RESULTS_AREA:
            return self.root / RESULTS_AREA
        if area == PRIVATE_AREA:
            return self.private_root
        raise ValueError(f"unknown area {area!r}")

    def _keys(self, area: str) -> list[str]:
        d = self._dir(area)
        if not d.is_dir():
            return []
        return [p.relative_to(d).as_posix() for p in d.glob("*/*/*.json")]

    def _read(self, area: str, key: str) -> bytes:
        return (self._dir(area) / key).read_bytes()

    def _write_new(self, area: str, key: str, data: bytes) -> None:
        final = self._dir(area) / key
        final.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
        if area != "private":  # private twins keep mkstemp's owner-only mode
            make_public(fd)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o444)
            try:
                os.link(tmp, final)  # atomic, and fails if ``final`` exists: write-once
            except FileExistsError:
                raise ResultExistsError(f"{final} already exists; results are immutable") from None
        finally:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass


def _is_conflict(exc: BaseException) -> bool:
    status = getattr(getattr(exc, "response", None), "status_code", None)
    return status in (409, 412)


class HubStore(ResultStore):
    """Results in a Hub dataset repo (``results/...``), private twins in ``private_repo_id``.

    Args:
        repo_id: The public results dataset repo (``owner/name``).
        private_repo_id: The private twins' dataset repo; None: ``<repo_id>-private``.
        api: An ``huggingface_hub.HfApi`` (or an object with the same methods); None: one built
            from ``token`` and ``endpoint``.
        token: Hub token for the ``HfApi`` built when ``api`` is None.
        endpoint: Hub endpoint for the ``HfApi`` built when ``api`` is None (None: the default).
        max_per_day: Results one submitter may store per UTC day.
        clock: Returns the current time (timezone-aware); None: UTC now.
        create: Create both repos if needed (``private_repo_id`` as a private repo).
        max_retries: Retries of a commit refused because another commit moved the head.

    Raises:
        ValueError: ``private_repo_id`` equals ``repo_id``.
    """

    def __init__(
        self,
        repo_id: str,
        *,
        private_repo_id: str | None = None,
        api: Any = None,
        token: str | None = None,
        endpoint: str | None = None,
        max_per_day: int = DEFAULT_MAX_PER_DAY,
        clock: Callable[[], datetime] | None = None,
        create: bool = False,
        max_retries: int = 3,
    ):
        if api is None:
            from huggingface_hub import HfApi

            api = HfApi(endpoint=endpoint, token=token)
        self.api = api
        self.repo_id = repo_id
        self.private_repo_id = private_repo_id or f"{repo_id}-private"
        if self.private_repo_id == repo_id:
            raise ValueError(
                "private_repo_id must differ from repo_id: private scores and contacts never go "
                "into the public results repo"
            )
        self.max_per_day = int(max_per_day)
        self.max_retries = int(max_retries)
        if clock is not None:
            self.clock = clock
        if create:
            api.create_repo(repo_id=repo_id, repo_type="dataset", exist_ok=True)
            api.create_repo(repo_id=self.private_repo_id, repo_type="dataset", private=True, exist_ok=True)

    def _repo(self, area: str) -> str:
        if area == RESULTS_AREA:
            return self.repo_id
        if area == PRIVATE_AREA:
            return self.private_repo_id
        raise ValueError(f"unknown area {area!r}")

    def _head(self, area: str) -> str | None:
        return getattr(self.api.repo_info(self._repo(area), repo_type="dataset"), "sha", None)

    def _files(self, area: str, revision: str | None) -> list[str]:
        return list(self.api.list_repo_files(self._repo(area), repo_type="dataset", revision=revision))

    def _keys(self, area: str) -> list[str]:
        prefix = f"{area}/"
        return [f[len(prefix) :] for f in self._files(area, None) if f.startswith(prefix)]

    def _read(self, area: str, key: str) -> bytes:
        path = self.api.hf_hub_download(self._repo(area), f"{area}/{key}", repo_type="dataset")
        return Path(path).read_bytes()

    def _write_new(self, area: str, key: str, data: bytes) -> None:
        from huggingface_hub import CommitOperationAdd

        repo = self._repo(area)
        path = f"{area}/{key}"
        for attempt in range(self.max_retries + 1):
            head = self._head(area)
            if path in set(self._files(area, head)):
                raise ResultExistsError(f"{repo}:{path} already exists; results are immutable")
            try:
                self.api.create_commit(
                    repo,
                    [CommitOperationAdd(path_in_repo=path, path_or_fileobj=data)],
                    commit_message=f"Add result {key}",
                    repo_type="dataset",
                    parent_commit=head,
                )
                return
            except Exception as e:  # a concurrent commit moved the head: check again, then retry
                if not _is_conflict(e) or attempt == self.max_retries:
                    raise
                logger.info("concurrent commit on %s; retrying (%d/%d)", repo, attempt + 1, self.max_retries)

    def sync(self, dest: str | os.PathLike, area: str = RESULTS_AREA) -> list[str]:
        """Download the results missing from ``dest/<area>`` (results are immutable, so a file
        already present is up to date). Returns the keys downloaded.

        Args:
            dest: The local folder; files go to ``dest/<area>/<key>`` (written atomically;
                private twins owner-only).
            area: ``"results"`` or ``"private"``.

        Returns:
            The keys downloaded in this call.

        Raises:
            ValueError: ``area`` is unknown.
        """
        dest = Path(dest) / area
        new = []
        for key in self.keys(area):
            out = dest / key
            if out.exists():
                continue
            data = self._read(area, key)
            with atomic_path(out) as tmp:
                if area == "private":  # private twins stay owner-only
                    os.chmod(tmp, 0o600)
                tmp.write_bytes(data)
            new.append(key)
        return new


def load_results(paths: Iterable[str | os.PathLike]) -> list[dict[str, Any]]:
    """Read every result JSON under the given folders (``results/...`` layout or any tree).

    Args:
        paths: Folders (searched recursively for ``*.json``; hidden files skipped) or files.

    Returns:
        The JSON objects whose ``schema`` is ``"dialfork-leaderboard-result"`` (other JSON
        files are skipped), each with ``_file`` set to its path unless it has one.

    Raises:
        json.JSONDecodeError: A JSON file under the folders is malformed.
        OSError: A file cannot be read.
    """
    out = []
    for p in paths:
        p = Path(p)
        files = [p] if p.is_file() else sorted(p.rglob("*.json"))
        for f in files:
            if f.name.startswith("."):
                continue
            with open(f, encoding="utf-8") as fh:
                obj = json.load(fh)
            if isinstance(obj, dict) and obj.get("schema") == "dialfork-leaderboard-result":
                obj.setdefault("_file", str(f))
                out.append(obj)
    return out
