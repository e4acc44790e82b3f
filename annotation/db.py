"""The study's database (SQLAlchemy 2; SQLite by default, PostgreSQL by URL)."""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
    create_engine,
    event,
)
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

SCHEMA_VERSION = "1"

#: Assignment states: the next step to answer is ``state + 1``; DONE = all steps answered.
NEW, STEP1_DONE, STEP2_DONE, DONE = 0, 1, 2, 3


def utcnow() -> datetime:
    """Naive UTC now (stored naive: SQLite keeps no time zone)."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class Meta(Base):
    __tablename__ = "meta"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class Conversation(Base):
    """One corpus record and its step-2 cue (assigned once, from the study seed)."""

    __tablename__ = "conversation"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dialogue_id: Mapped[str] = mapped_column(String(255), unique=True, index=True)
    task: Mapped[str] = mapped_column(String(128), index=True)
    source_id: Mapped[str] = mapped_column(String(255), index=True)
    hallucination_type: Mapped[str | None] = mapped_column(String(8))
    variant: Mapped[str | None] = mapped_column(String(128))
    fork_position: Mapped[int | None] = mapped_column(Integer)
    fork_turn: Mapped[int | None] = mapped_column(Integer)
    num_system_turns: Mapped[int] = mapped_column(Integer)
    record: Mapped[dict] = mapped_column(JSON)
    cue_seed: Mapped[int] = mapped_column(BigInteger)
    cue_kind: Mapped[str] = mapped_column(String(8))
    cue_type: Mapped[str] = mapped_column(String(8))
    cue_variant: Mapped[str] = mapped_column(String(128))
    cue_text: Mapped[str] = mapped_column(Text)
    true_cue_text: Mapped[str | None] = mapped_column(Text)


class Annotator(Base):
    __tablename__ = "annotator"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    link_token: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=utcnow)


class IntroSeen(Base):
    __tablename__ = "intro_seen"
    annotator_id: Mapped[int] = mapped_column(ForeignKey("annotator.id"), primary_key=True)
    task: Mapped[str] = mapped_column(String(128), primary_key=True)
    seen_at: Mapped[datetime] = mapped_column(DateTime(), default=utcnow)


class Batch(Base):
    __tablename__ = "batch"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task: Mapped[str] = mapped_column(String(128))
    seed: Mapped[int] = mapped_column(BigInteger)
    params: Mapped[dict] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=utcnow)


class Block(Base):
    """A mini-block: five conversations (slot order k1..k4, conformant)."""

    __tablename__ = "block"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    task: Mapped[str] = mapped_column(String(128), index=True)
    batch_id: Mapped[int] = mapped_column(ForeignKey("batch.id"))
    latin_row: Mapped[int] = mapped_column(Integer)
    dialogue_ids: Mapped[list] = mapped_column(JSON)
    sources: Mapped[list] = mapped_column(JSON)


class Assignment(Base):
    """One conversation given to one annotator, with its answers (one row, updated per step)."""

    __tablename__ = "assignment"
    __table_args__ = (UniqueConstraint("annotator_id", "conversation_id", name="uq_annotator_conversation"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    token: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    annotator_id: Mapped[int] = mapped_column(ForeignKey("annotator.id"), index=True)
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversation.id"), index=True)
    batch_id: Mapped[int] = mapped_column(ForeignKey("batch.id"))
    block_id: Mapped[int] = mapped_column(ForeignKey("block.id"))
    block_fresh: Mapped[bool] = mapped_column(Boolean)
    position: Mapped[int] = mapped_column(Integer)
    order_seed: Mapped[int] = mapped_column(BigInteger)
    needs_step3: Mapped[bool] = mapped_column(Boolean)
    state: Mapped[int] = mapped_column(Integer, default=NEW)
    slider: Mapped[int | None] = mapped_column(Integer)
    cue_answer: Mapped[str | None] = mapped_column(String(8))
    onset_turn: Mapped[int | None] = mapped_column(Integer)
    prefix_answer: Mapped[str | None] = mapped_column(String(8))
    note: Mapped[str | None] = mapped_column(Text)
    assigned_at: Mapped[datetime] = mapped_column(DateTime(), default=utcnow)
    step1_at: Mapped[datetime | None] = mapped_column(DateTime())
    step2_at: Mapped[datetime | None] = mapped_column(DateTime())
    step3_at: Mapped[datetime | None] = mapped_column(DateTime())
    completed_at: Mapped[datetime | None] = mapped_column(DateTime())


class AdminSession(Base):
    __tablename__ = "admin_session"
    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    expires_at: Mapped[datetime] = mapped_column(DateTime())


class LoginThrottleRow(Base):
    """Admin-login throttle state (:class:`annotation.security.LoginThrottle`): one row per
    client key, plus the global bucket under key ``"*"``. Times are Unix seconds."""

    __tablename__ = "login_throttle"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    next_allowed: Mapped[float] = mapped_column(Float, default=0.0)
    last_attempt: Mapped[float] = mapped_column(Float, default=0.0)
    tokens: Mapped[float] = mapped_column(Float, default=0.0)
    version: Mapped[int] = mapped_column(Integer, default=0)


def _check_sqlite_path(database: str | None) -> None:
    """An SQLite file path must name a file in an existing folder (SQLite creates the file, never
    its folder); ``:memory:`` and ``file:`` URIs are left to SQLite."""
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    from pathlib import Path

    path = Path(database).expanduser()
    if path.is_dir():
        raise ValueError(f"study database {database}: is a folder; give a file path, e.g. {path / 'study.db'}")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"study database {database}: the folder {path.parent} does not exist; create it "
                                f"(mkdir -p {path.parent}) or give a path in an existing folder")


def make_engine(url: str) -> Engine:
    """An engine for ``url`` (a bare path is taken as an SQLite file); creates the tables.

    Args:
        url: An SQLAlchemy URL (``sqlite:///study.db``, ``postgresql://...``) or a file path.

    Returns:
        Engine: The engine, with every table created.

    Raises:
        FileNotFoundError: An SQLite file whose folder does not exist.
        ValueError: ``url`` is not a database URL, names a folder, lacks its driver, or the
            database cannot be opened (the reason, with the password hidden).
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    if "://" not in url:
        url = f"sqlite:///{url}"
    try:
        parsed = make_url(url)
    except ArgumentError as e:
        raise ValueError(f"study database {url!r}: not a database URL or file path ({e})") from None
    shown = parsed.render_as_string(hide_password=True)
    kw: dict = {}
    if url.startswith("sqlite"):
        _check_sqlite_path(parsed.database)
        kw["connect_args"] = {"check_same_thread": False, "timeout": 30}
    try:
        engine = create_engine(url, future=True, **kw)
    except ImportError as e:  # e.g. postgresql:// without psycopg2
        raise ValueError(f"study database {shown}: its driver is not installed ({e})") from None
    except ArgumentError as e:
        raise ValueError(f"study database {shown}: {e}") from None
    if url.startswith("sqlite"):
        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _rec):  # pragma: no cover - trivial
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=FULL")
            cur.close()
    try:
        Base.metadata.create_all(engine)
    except SQLAlchemyError as e:  # unreadable file, no permission, server down, not a database...
        reason = getattr(e, "orig", None) or e
        raise ValueError(f"cannot open the study database {shown}: {reason}") from None
    return engine
