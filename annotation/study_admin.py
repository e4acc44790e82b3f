"""The administrator's side of a study: the admin password and sessions, and the annotators (each
with a personal link). Mixed into :class:`annotation.store.Study`."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from .db import AdminSession, Annotator, Meta, utcnow
from .inputs import Conflict, Invalid, NotFound
from .security import hash_password, new_token, token_digest, verify_password

#: Hours an admin session lasts.
ADMIN_SESSION_HOURS = 8


class StudyAdmin:
    """Admin authentication and annotators of a study (needs ``engine`` and ``meta``)."""

    # -- admin authentication -------------------------------------------------------------------
    def set_admin_password(self, password: str) -> None:
        """Store the scrypt hash of a new admin password and end every admin session.

        Args:
            password: The new password (a non-empty string).

        Raises:
            ValueError: ``password`` is empty or not a string.
        """
        h = hash_password(password)
        with Session(self.engine) as s, s.begin():
            m = s.get(Meta, "admin_hash")
            if m is None:
                s.add(Meta(key="admin_hash", value=h))
            else:
                m.value = h
            s.query(AdminSession).delete()

    def check_admin_password(self, password: str) -> bool:
        """Whether ``password`` is the admin password (scrypt, constant-time comparison).

        Args:
            password: The password given.

        Returns:
            True when it matches; False when it does not or no admin password is set.
        """
        stored = self.meta("admin_hash")
        if not stored:
            return False
        return verify_password(password, stored)

    def new_admin_session(self) -> str:
        """Open an admin session of :data:`ADMIN_SESSION_HOURS` hours (expired ones are deleted).

        Returns:
            The session token for the cookie (the database keeps only its SHA-256 digest).
        """
        tok = new_token(24)
        with Session(self.engine) as s, s.begin():
            s.query(AdminSession).filter(AdminSession.expires_at < utcnow()).delete()
            s.add(
                AdminSession(
                    digest=token_digest(tok), expires_at=utcnow() + timedelta(hours=ADMIN_SESSION_HOURS)
                )
            )
        return tok

    def check_admin_session(self, token: str | None) -> bool:
        """Whether ``token`` is an open, unexpired admin session.

        Args:
            token: The session cookie's value, or None.

        Returns:
            True for a valid session; False otherwise (also for None or an empty token).
        """
        if not token:
            return False
        with Session(self.engine) as s:
            row = s.get(AdminSession, token_digest(token))
            return row is not None and row.expires_at > utcnow()

    def end_admin_session(self, token: str | None) -> None:
        """Delete an admin session (log out); nothing happens for an unknown or empty token.

        Args:
            token: The session cookie's value, or None.
        """
        if token:
            with Session(self.engine) as s, s.begin():
                s.query(AdminSession).filter(AdminSession.digest == token_digest(token)).delete()

    # -- annotators -----------------------------------------------------------------------------
    def create_annotator(self, name: str) -> dict[str, Any]:
        """Add an annotator with a new personal link.

        Args:
            name: The annotator's display name (whitespace collapsed; 1 to 128 characters,
                unique in the study).

        Returns:
            ``{"id", "name", "link_token"}``; the personal link is ``/a/<link_token>``.

        Raises:
            Invalid: The name is empty or longer than 128 characters.
            Conflict: An annotator with that name exists.
        """
        name = " ".join(str(name or "").split())
        if not name or len(name) > 128:
            raise Invalid("an annotator needs a name of 1 to 128 characters")
        try:
            return self._create_annotator(name)
        except IntegrityError:  # a concurrent creation of the same name
            raise Conflict(f"an annotator named {name!r} already exists") from None

    def _create_annotator(self, name: str) -> dict[str, Any]:
        with Session(self.engine) as s, s.begin():
            if s.scalar(select(Annotator).where(Annotator.name == name)) is not None:
                raise Conflict(f"an annotator named {name!r} already exists")
            a = Annotator(name=name, link_token=new_token(18))
            s.add(a)
            s.flush()
            return {"id": a.id, "name": a.name, "link_token": a.link_token}

    def annotators(self) -> list[dict[str, Any]]:
        """Every annotator of the study.

        Returns:
            ``{"id", "name", "link_token"}`` per annotator, by id.
        """
        with Session(self.engine) as s:
            return [
                {"id": a.id, "name": a.name, "link_token": a.link_token}
                for a in s.scalars(select(Annotator).order_by(Annotator.id))
            ]

    def annotator_by_link(self, link_token: str) -> Annotator:
        """The annotator whose personal link holds ``link_token``.

        Args:
            link_token: The token of the personal link.

        Returns:
            The annotator row (detached from its session).

        Raises:
            NotFound: No annotator has that link.
        """
        with Session(self.engine) as s:
            a = s.scalar(select(Annotator).where(Annotator.link_token == str(link_token)))
            if a is None:
                raise NotFound("unknown annotator link; ask the study's administrator for your personal link")
            s.expunge(a)
            return a
