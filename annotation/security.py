"""Secrets of the annotation app: password hashing, opaque tokens, login throttling."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import deque

#: scrypt cost parameters (RFC 7914's interactive-login recommendation).
SCRYPT_N, SCRYPT_R, SCRYPT_P, SCRYPT_DKLEN = 2**14, 8, 1, 32


def new_token(nbytes: int = 18) -> str:
    """An opaque URL-safe random token (``secrets``); ``nbytes`` of entropy."""
    return secrets.token_urlsafe(nbytes)


def new_password() -> str:
    return secrets.token_urlsafe(12)


def hash_password(password: str, *, n: int = SCRYPT_N, r: int = SCRYPT_R, p: int = SCRYPT_P) -> str:
    """``scrypt$n$r$p$salt_hex$hash_hex`` (hashlib.scrypt with a 16-byte random salt)."""
    if not isinstance(password, str) or not password:
        raise ValueError("the admin password must be a non-empty string")
    salt = secrets.token_bytes(16)
    dk = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, dklen=SCRYPT_DKLEN)
    return f"scrypt${n}${r}${p}${salt.hex()}${dk.hex()}"


def verify_password(password: str, stored: str) -> bool:
    """Constant-time check of ``password`` against a :func:`hash_password` string."""
    try:
        algo, n, r, p, salt_hex, hash_hex = stored.split("$")
        if algo != "scrypt":
            return False
        expected = bytes.fromhex(hash_hex)
        dk = hashlib.scrypt(str(password).encode("utf-8"), salt=bytes.fromhex(salt_hex), n=int(n), r=int(r),
                            p=int(p), dklen=len(expected))
    except (ValueError, AttributeError, TypeError):
        return False
    return hmac.compare_digest(dk, expected)


def token_digest(token: str) -> str:
    """SHA-256 hex digest of a session token (the database stores digests, never tokens)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class LoginThrottle:
    """Failed-login limiter: at most ``max_failures`` per client within ``window_s`` seconds, and
    at most ``global_max_failures`` from all clients together (against address rotation).

    ``retry_after(client)`` is 0 when an attempt is allowed, else the seconds to wait.
    """

    def __init__(self, max_failures: int = 5, window_s: float = 300.0, global_max_failures: int = 50,
                 clock=time.monotonic):
        self.max_failures = max_failures
        self.window_s = window_s
        self.global_max_failures = global_max_failures
        self._clock = clock
        self._per: dict[str, deque[float]] = {}
        self._all: deque[float] = deque()
        self._lock = threading.Lock()

    def _prune(self, q: deque[float], now: float) -> None:
        while q and now - q[0] >= self.window_s:
            q.popleft()

    def retry_after(self, client: str) -> float:
        now = self._clock()
        with self._lock:
            q = self._per.get(client, deque())
            self._prune(q, now)
            self._prune(self._all, now)
            waits = []
            if len(q) >= self.max_failures:
                waits.append(self.window_s - (now - q[0]))
            if len(self._all) >= self.global_max_failures:
                waits.append(self.window_s - (now - self._all[0]))
            return max(waits) if waits else 0.0

    def failure(self, client: str) -> None:
        now = self._clock()
        with self._lock:
            self._per.setdefault(client, deque()).append(now)
            self._all.append(now)

    def success(self, client: str) -> None:
        with self._lock:
            self._per.pop(client, None)
