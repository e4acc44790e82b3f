"""Secrets of the annotation app: password hashing, opaque tokens, login throttling, CSV cells.

The threat model and every limit are described in ``docs/annotation-security.md``."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import math
import secrets
import threading
import time
from typing import Any

logger = logging.getLogger(__name__)

#: scrypt cost parameters (RFC 7914's interactive-login recommendation).
SCRYPT_N, SCRYPT_R, SCRYPT_P, SCRYPT_DKLEN = 2**14, 8, 1, 32


def new_token(nbytes: int = 18) -> str:
    """An opaque URL-safe random token (``secrets``); ``nbytes`` of entropy.

    Args:
        nbytes: Random bytes (default 18, giving 24 characters).

    Returns:
        The token (URL-safe base64 text).
    """
    return secrets.token_urlsafe(nbytes)


def new_password() -> str:
    """A random admin password (``secrets``, 12 random bytes), made when none is given at start.

    Returns:
        The password (16 URL-safe characters).
    """
    return secrets.token_urlsafe(12)


def hash_password(password: str, *, n: int = SCRYPT_N, r: int = SCRYPT_R, p: int = SCRYPT_P) -> str:
    """``scrypt$n$r$p$salt_hex$hash_hex`` (hashlib.scrypt with a 16-byte random salt).

    Args:
        password: The password to hash (a non-empty string; hashed as UTF-8).
        n: scrypt CPU/memory cost (a power of two; RFC 7914's interactive-login value by default).
        r: scrypt block size.
        p: scrypt parallelism.

    Returns:
        The self-describing hash string ``scrypt$n$r$p$salt_hex$hash_hex`` (a 32-byte key), to
        check with :func:`verify_password`.

    Raises:
        ValueError: ``password`` is not a string or is empty (``hashlib.scrypt`` also raises
            ValueError for invalid cost parameters).
    """
    if not isinstance(password, str) or not password:
        raise ValueError("the admin password must be a non-empty string")
    salt = secrets.token_bytes(16)
    dk = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, dklen=SCRYPT_DKLEN)
    return f"scrypt${n}${r}${p}${salt.hex()}${dk.hex()}"


def verify_password(password: str, stored: str) -> bool:
    """Constant-time check of ``password`` against a :func:`hash_password` string.

    Args:
        password: The password given (converted with ``str``).
        stored: The stored :func:`hash_password` string (its cost parameters are used).

    Returns:
        True when the password matches; False when it does not or ``stored`` is malformed or
        not an scrypt hash (never raises for bad input).
    """
    try:
        algo, n, r, p, salt_hex, hash_hex = stored.split("$")
        if algo != "scrypt":
            return False
        expected = bytes.fromhex(hash_hex)
        dk = hashlib.scrypt(
            str(password).encode("utf-8"),
            salt=bytes.fromhex(salt_hex),
            n=int(n),
            r=int(r),
            p=int(p),
            dklen=len(expected),
        )
    except (ValueError, AttributeError, TypeError):
        return False
    return hmac.compare_digest(dk, expected)


def token_digest(token: str) -> str:
    """SHA-256 hex digest of a session token (the database stores digests, never tokens).

    Args:
        token: The token.

    Returns:
        64 lowercase hex characters.
    """
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


GLOBAL_KEY = "*"
"""Key of the global token bucket in the throttle table (no client key can equal it)."""


def client_key(host: str | None) -> str:
    """The throttle key of a client address: an IPv4 address as is, an IPv6 address by its /64
    prefix (one subscriber holds a whole /64, so single addresses would be free to rotate), any
    other string (a Unix socket, a test client) as is, at most 64 characters.

    Args:
        host: The client's address, or None.

    Returns:
        The key: ``"unknown"`` for an empty or None host; an IPv4-mapped IPv6 address gives its
        IPv4 address.
    """
    if not host:
        return "unknown"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return str(host)[:64]
    if ip.version == 6:
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


class _Race(Exception):
    """Another process changed a throttle row between our read and our write."""


class LoginThrottle:
    """Admin-login limiter, stored in the study database so that every server process and the
    ``reset-throttle`` command share it, and a restart does not forgive an attacker.

    Each attempt is checked **and recorded** in one compare-and-set transaction *before* the
    password is verified (:meth:`attempt`), so a concurrent burst cannot slip through between
    the check and the verification. Two limits:

    * **per client** (:func:`client_key`): the first ``free_failures`` failed attempts are free;
      the n-th failure (n >= ``free_failures``) makes the client wait
      ``min(max_delay_s, base_delay_s * 2 ** (n - free_failures))`` seconds before its next
      attempt (defaults: 3 free, then 1, 2, 4, ... s, capped at 15 min). A success clears the
      client's count; so does ``forget_s`` seconds without any attempt (default 1 h).
    * **global** (against address rotation): a token bucket of ``global_burst`` attempts,
      refilled at ``global_rate`` attempts per second, shared by all clients. It only slows
      attempts down: an empty bucket answers with a wait of at most ``1 / global_rate``
      seconds, and it is full again ``global_burst / global_rate`` seconds after an attack
      stops; it never locks anybody out for a window.

    Args:
        engine: An SQLAlchemy engine with the ``login_throttle`` table (the study's); ``None``: a
            private in-memory SQLite database.
        free_failures: Failed attempts per client before any wait (integer >= 1).
        base_delay_s: Wait in seconds after the ``free_failures``-th failure; doubled for each
            further failure (> 0).
        max_delay_s: Cap of the per-client wait in seconds (> 0; default 15 min).
        forget_s: Seconds without any attempt after which a client's failures are forgotten
            (> 0; default 1 h).
        global_rate: Refill rate of the global bucket, in attempts per second (> 0).
        global_burst: Capacity of the global bucket, in attempts (integer >= 1).
        cache_s: A wait read from the database is remembered in memory for at most this many
            seconds, in [0, 60) (default 1 s), so that a burst is refused by :meth:`quick_wait`
            without a thread or a database query; a ``reset-throttle`` from another process
            therefore reaches a running server within ``cache_s``.
        clock: A function returning the time in seconds (``time.time`` by default; tests inject
            one).

    Raises:
        ValueError: Any limit is out of range (every problem named in one message).
    """

    def __init__(
        self,
        engine: Any = None,
        *,
        free_failures: int = 3,
        base_delay_s: float = 1.0,
        max_delay_s: float = 900.0,
        forget_s: float = 3600.0,
        global_rate: float = 1.0,
        global_burst: int = 20,
        cache_s: float = 1.0,
        clock=time.time,
    ):
        errs = []
        if not isinstance(free_failures, int) or free_failures < 1:
            errs.append(f"free_failures must be an integer >= 1, got {free_failures!r}")
        for name, v in (
            ("base_delay_s", base_delay_s),
            ("max_delay_s", max_delay_s),
            ("forget_s", forget_s),
            ("global_rate", global_rate),
        ):
            if not isinstance(v, (int, float)) or not v > 0 or not math.isfinite(v):
                errs.append(f"{name} must be a positive number, got {v!r}")
        if not isinstance(cache_s, (int, float)) or not 0 <= cache_s < 60:
            errs.append(f"cache_s must be a number of seconds in [0, 60), got {cache_s!r}")
        if not isinstance(global_burst, int) or global_burst < 1:
            errs.append(f"global_burst must be an integer >= 1, got {global_burst!r}")
        if errs:
            raise ValueError("LoginThrottle: " + "; ".join(errs))
        if engine is None:
            from sqlalchemy import create_engine
            from sqlalchemy.pool import StaticPool

            from .db import Base

            engine = create_engine(
                "sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False}
            )
            Base.metadata.create_all(engine)
        self.engine = engine
        self.free_failures = free_failures
        self.base_delay_s = float(base_delay_s)
        self.max_delay_s = float(max_delay_s)
        self.forget_s = float(forget_s)
        self.global_rate = float(global_rate)
        self.global_burst = int(global_burst)
        self.cache_s = float(cache_s)
        self._clock = clock
        self._lock = threading.Lock()  # serialises this process's attempts; the CAS guards other processes
        self._known: dict[str, tuple[float, float]] = {}  # key -> (waits until, learnt at)

    def config(self) -> dict[str, Any]:
        """The throttle's limits (shown in the admin panel).

        Returns:
            ``free_failures``, ``base_delay_s``, ``max_delay_s``, ``forget_s``, ``global_rate``
            and ``global_burst``.
        """
        return {
            "free_failures": self.free_failures,
            "base_delay_s": self.base_delay_s,
            "max_delay_s": self.max_delay_s,
            "forget_s": self.forget_s,
            "global_rate": self.global_rate,
            "global_burst": self.global_burst,
        }

    def delay(self, failures: int) -> float:
        """Seconds a client must wait after its ``failures``-th consecutive failure.

        Args:
            failures: Consecutive failed attempts so far.

        Returns:
            0.0 below ``free_failures``, else ``base_delay_s * 2 ** (failures - free_failures)``
            capped at ``max_delay_s``.
        """
        if failures < self.free_failures:
            return 0.0
        return min(self.max_delay_s, self.base_delay_s * 2.0 ** min(failures - self.free_failures, 64))

    # -- state --------------------------------------------------------------------------------
    def _client_state(self, row, now: float) -> tuple[int, float]:
        if row is None or now - row.last_attempt >= self.forget_s:
            return 0, 0.0
        return row.failures, row.next_allowed

    def _tokens(self, g, now: float) -> float:
        if g is None:
            return float(self.global_burst)
        return min(float(self.global_burst), g.tokens + max(0.0, now - g.last_attempt) * self.global_rate)

    def _write(self, s, row_cls, key: str, row, **values) -> None:
        from sqlalchemy import update

        if row is None:
            s.add(row_cls(key=key, version=1, **values))
            s.flush()  # IntegrityError if another process inserted it meanwhile
            return
        res = s.execute(
            update(row_cls)
            .where(row_cls.key == key, row_cls.version == row.version)
            .values(version=row.version + 1, **values)
            .execution_options(synchronize_session=False)
        )
        if res.rowcount != 1:
            raise _Race()

    def _transaction(self, fn):
        from sqlalchemy.exc import IntegrityError, OperationalError
        from sqlalchemy.orm import Session

        for i in range(50):
            with self._lock:
                try:
                    with Session(self.engine) as s, s.begin():
                        return fn(s)
                except (_Race, IntegrityError, OperationalError) as e:  # another process won the race
                    last = e
            time.sleep(min(0.05, 0.001 * 2**i))
        raise RuntimeError(f"login throttle: the database stayed busy ({last})")

    def _remember(self, key: str, until: float, now: float) -> None:
        if len(self._known) > 100_000:  # bounded memory under address rotation
            self._known.clear()
        self._known[key] = (until, now)

    # -- API ----------------------------------------------------------------------------------
    def quick_wait(self, client: str | None) -> float:
        """A wait this process already knows (no database, no thread: safe on the event loop);
        0.0 means "unknown": call :meth:`attempt`.

        Args:
            client: The client's address (see :func:`client_key`), or None.

        Returns:
            Seconds still to wait, as learnt from the database at most ``cache_s`` ago (the
            larger of the client's and the global wait), or 0.0.
        """
        now = float(self._clock())
        waits = [0.0]
        for key in (client_key(client), GLOBAL_KEY):
            until, learnt = self._known.get(key, (0.0, 0.0))
            if now < until and now - learnt < self.cache_s:
                waits.append(until - now)
        return max(waits)

    def attempt(self, client: str | None) -> float:
        """Check and record one login attempt of ``client`` atomically, before the password is
        verified. Returns 0.0 when the attempt may go on (it is already counted as a failure;
        call :meth:`success` if the password is right), else the seconds to wait (nothing is
        recorded then).

        Args:
            client: The client's address (see :func:`client_key`), or None.

        Returns:
            0.0 when the attempt may proceed, else the seconds to wait (the client's back-off or
            the global bucket's refill).

        Raises:
            RuntimeError: The database stayed busy through 50 compare-and-set retries.
        """
        from .db import LoginThrottleRow as Row

        key = client_key(client)
        now = float(self._clock())

        def fn(s) -> float:
            row, g = s.get(Row, key), s.get(Row, GLOBAL_KEY)
            failures, next_allowed = self._client_state(row, now)
            if now < next_allowed:
                self._remember(key, next_allowed, now)
                return next_allowed - now
            tokens = self._tokens(g, now)
            if tokens < 1.0:
                wait = (1.0 - tokens) / self.global_rate
                self._remember(GLOBAL_KEY, now + wait, now)
                return wait
            failures += 1
            next_allowed = now + self.delay(failures)
            self._write(
                s, Row, key, row, failures=failures, next_allowed=next_allowed, last_attempt=now, tokens=0.0
            )
            self._write(
                s, Row, GLOBAL_KEY, g, failures=0, next_allowed=0.0, last_attempt=now, tokens=tokens - 1.0
            )
            if next_allowed > now:
                self._remember(key, next_allowed, now)
            return 0.0

        wait = self._transaction(fn)
        if wait > 0:
            logger.info("admin login from %s throttled for %.1f s", key, wait)
        return wait

    def retry_after(self, client: str | None) -> float:
        """Seconds ``client`` must wait before its next attempt (0.0: it may try now); records nothing.

        Args:
            client: The client's address (see :func:`client_key`), or None.

        Returns:
            The larger of the client's remaining back-off and the global bucket's wait, >= 0.0.
        """
        from sqlalchemy.orm import Session

        from .db import LoginThrottleRow as Row

        now = float(self._clock())
        with Session(self.engine) as s:
            _, next_allowed = self._client_state(s.get(Row, client_key(client)), now)
            tokens = self._tokens(s.get(Row, GLOBAL_KEY), now)
        waits = [next_allowed - now, (1.0 - tokens) / self.global_rate]
        return max(0.0, *waits)

    def success(self, client: str | None) -> None:
        """The password was right: clear ``client``'s failures.

        Args:
            client: The client's address (see :func:`client_key`), or None.
        """
        self.reset(client)

    def reset(self, client: str | None = None) -> int:
        """Forget ``client``'s failures (``None``: every client's and the global bucket). Returns
        how many rows were cleared.

        Args:
            client: The client's address (see :func:`client_key`); None clears every row.

        Returns:
            The number of throttle rows deleted.
        """
        from sqlalchemy import delete
        from sqlalchemy.orm import Session

        from .db import LoginThrottleRow as Row

        with self._lock, Session(self.engine) as s, s.begin():
            if client is None:
                self._known.clear()
            else:
                self._known.pop(client_key(client), None)
            q = delete(Row) if client is None else delete(Row).where(Row.key == client_key(client))
            return s.execute(q).rowcount

    def status(self) -> list[dict[str, Any]]:
        """Every throttled client: key, consecutive failures, seconds still to wait.

        Returns:
            One dict per throttle row, sorted by key: ``{"client", "failures", "wait_s"}`` for a
            client, ``{"client": "(all clients)", "tokens", "wait_s"}`` for the global bucket
            (seconds rounded to 0.1).
        """
        from sqlalchemy import select
        from sqlalchemy.orm import Session

        from .db import LoginThrottleRow as Row

        now = float(self._clock())
        with Session(self.engine) as s:
            rows = list(s.scalars(select(Row).order_by(Row.key)))
        out = []
        for r in rows:
            if r.key == GLOBAL_KEY:
                out.append(
                    {
                        "client": "(all clients)",
                        "tokens": round(self._tokens(r, now), 2),
                        "wait_s": round(max(0.0, (1.0 - self._tokens(r, now)) / self.global_rate), 1),
                    }
                )
            else:
                f, na = self._client_state(r, now)
                out.append({"client": r.key, "failures": f, "wait_s": round(max(0.0, na - now), 1)})
        return out


#: First characters that make a spreadsheet read a CSV cell as a formula (OWASP "CSV injection"),
#: plus the apostrophe used to neutralise them (so that neutralising is reversible).
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


def neutralize_cell(value: Any) -> Any:
    """A CSV cell a spreadsheet shows as text: a string starting with ``= + - @``, a tab, a
    carriage return or an apostrophe gets a leading apostrophe (which spreadsheets hide).
    Other values are returned unchanged. :func:`restore_cell` undoes it.

    Args:
        value: A cell value of any type.

    Returns:
        ``"'" + value`` for such a string, else ``value`` itself.
    """
    if isinstance(value, str) and value and (value[0] in FORMULA_TRIGGERS or value[0] == "'"):
        return "'" + value
    return value


def restore_cell(value: Any) -> Any:
    """The original of a :func:`neutralize_cell` cell.

    Args:
        value: A cell value of any type, as written by :func:`neutralize_cell`.

    Returns:
        The string without its leading apostrophe when the apostrophe precedes a formula
        trigger or another apostrophe, else ``value`` unchanged.
    """
    if (
        isinstance(value, str)
        and len(value) >= 2
        and value[0] == "'"
        and (value[1] in FORMULA_TRIGGERS or value[1] == "'")
    ):
        return value[1:]
    return value
