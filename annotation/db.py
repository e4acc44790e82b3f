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
    """Naive UTC now (stored naive: SQLite keeps no time zone).

    Returns:
        The current UTC time without ``tzinfo``.
    """
    return datetime.now(timezone.utc).replace(tzinfo=None)


class Base(DeclarativeBase):
    """The declarative base of the study's tables (``Base.metadata`` creates them).

    Attributes:
        metadata: SQLAlchemy's table collection of every model below.
    """

    pass


class Meta(Base):
    """A key-value setting of the study (e.g. ``study_seed``, ``foil_share``, ``admin_hash``).

    Attributes:
        key: The setting's name (primary key).
        value: Its value, as text.
    """

    __tablename__ = "meta"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class Conversation(Base):
    """One corpus record and its step-2 cue (assigned once, from the study seed).

    Attributes:
        id: Row id.
        dialogue_id: The record's dialogue id (unique).
        task: The record's task.
        source_id: The conformant source dialogue it belongs to.
        hallucination_type: The fork's type code; None for a conformant dialogue.
        variant: The injected variant's id; None for a conformant dialogue.
        fork_position: k (1..4); None for a conformant dialogue.
        fork_turn: t_k, the system turn where the fork starts; None for a conformant dialogue.
        num_system_turns: Number of system turns.
        record: The whole record (JSON).
        cue_seed: The seed the cue was drawn from.
        cue_kind: ``"true"`` or ``"foil"``.
        cue_type: The type code of the cue's variant.
        cue_variant: The cue's variant id.
        cue_text: The cue text shown in step 2.
        true_cue_text: The cue of the fork's own variant (for a foil, what a true cue would have
            shown); None for a conformant dialogue.
    """

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
    """One annotator.

    Attributes:
        id: Row id.
        name: Display name (unique).
        link_token: The opaque token of the annotator's personal link (unique).
        created_at: When the annotator was added (naive UTC).
    """

    __tablename__ = "annotator"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    link_token: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=utcnow)


class IntroSeen(Base):
    """An annotator has seen the introduction of a task (shown once per task).

    Attributes:
        annotator_id: The annotator (part of the primary key).
        task: The task (part of the primary key).
        seen_at: When (naive UTC).
    """

    __tablename__ = "intro_seen"
    annotator_id: Mapped[int] = mapped_column(ForeignKey("annotator.id"), primary_key=True)
    task: Mapped[str] = mapped_column(String(128), primary_key=True)
    seen_at: Mapped[datetime] = mapped_column(DateTime(), default=utcnow)


class Batch(Base):
    """One call that drew mini-blocks for some annotators of a task.

    Attributes:
        id: Row id.
        task: The task drawn from.
        seed: The batch seed of the draw.
        params: The draw's other parameters (``annotator_ids``, ``blocks_per_annotator``,
            ``overlap_share``, ``max_judges``).
        created_at: When (naive UTC).
    """

    __tablename__ = "batch"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task: Mapped[str] = mapped_column(String(128))
    seed: Mapped[int] = mapped_column(BigInteger)
    params: Mapped[dict] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=utcnow)


class Block(Base):
    """A mini-block: five conversations (slot order k1..k4, conformant).

    Attributes:
        id: The block's key (set by the draw, not auto-incremented).
        task: The task.
        batch_id: The batch that drew it first.
        latin_row: The Latin-square row that gave its fork types.
        dialogue_ids: The five dialogue ids, in slot order.
        sources: Their five (distinct) source ids, in the same order.
    """

    __tablename__ = "block"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    task: Mapped[str] = mapped_column(String(128), index=True)
    batch_id: Mapped[int] = mapped_column(ForeignKey("batch.id"))
    latin_row: Mapped[int] = mapped_column(Integer)
    dialogue_ids: Mapped[list] = mapped_column(JSON)
    sources: Mapped[list] = mapped_column(JSON)


class Assignment(Base):
    """One conversation given to one annotator, with its answers (one row, updated per step).

    Attributes:
        id: Row id.
        token: The opaque token of the assignment's page (unique).
        annotator_id: The annotator.
        conversation_id: The conversation (an annotator gets each conversation at most once).
        batch_id: The batch that assigned it.
        block_id: The mini-block it belongs to.
        block_fresh: Whether the block was drawn fresh for this annotator (False: a copy of
            another annotator's block).
        position: Rank in the annotator's sequence (1-based).
        order_seed: Seed of the block's presentation order.
        needs_step3: Whether step 3 (the prefix question) is asked: a fork with t_k > 1.
        state: :data:`NEW`, :data:`STEP1_DONE`, :data:`STEP2_DONE` or :data:`DONE`.
        slider: Step-1 rating, 0..100.
        cue_answer: Step-2 answer: ``"yes"``, ``"partly"`` or ``"no"``.
        onset_turn: Step-2 onset (a system-turn number), when the cue was confirmed.
        prefix_answer: Step-3 answer: ``"yes"``, ``"mostly"`` or ``"no"``.
        note: The annotator's free-text note.
        assigned_at: When it was assigned (naive UTC).
        step1_at: When step 1 was answered.
        step2_at: When step 2 was answered.
        step3_at: When step 3 was answered.
        completed_at: When every step was answered.
    """

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
    """An open admin session (the cookie's token is stored only as its digest).

    Attributes:
        digest: SHA-256 hex digest of the session token (primary key).
        expires_at: When the session ends (naive UTC).
    """

    __tablename__ = "admin_session"
    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    expires_at: Mapped[datetime] = mapped_column(DateTime())


class LoginThrottleRow(Base):
    """Admin-login throttle state (:class:`annotation.security.LoginThrottle`): one row per
    client key, plus the global bucket under key ``"*"``. Times are Unix seconds.

    Attributes:
        key: The client key (:func:`annotation.security.client_key`), or ``"*"``.
        failures: Consecutive failed attempts of the client.
        next_allowed: Time before which the client's next attempt is refused.
        last_attempt: Time of the last attempt.
        tokens: The global bucket's tokens at ``last_attempt`` (global row only).
        version: Row version of the compare-and-set update.
    """

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
        raise ValueError(
            f"study database {database}: is a folder; give a file path, e.g. {path / 'study.db'}"
        )
    if not path.parent.is_dir():
        raise FileNotFoundError(
            f"study database {database}: the folder {path.parent} does not exist; create it "
            f"(mkdir -p {path.parent}) or give a path in an existing folder"
        )


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
