"""SQL tables of the buffer (SQLAlchemy 2.x ORM), readable with plain SQLAlchemy.

Owns the table layouts only: ``experiences`` (rollouts, with replay bookkeeping), ``tasks``
(tasksets stored in SQL), ``sft`` and ``dpo`` (training datasets), and ``buffer_writers``
(which producers are still writing). Several buffers may share one database: every table
has a ``buffer`` column holding the storage's ``name``.

Reading experiences outside trivium::

    engine = create_engine("sqlite:///buffer.db")
    session = sessionmaker(bind=engine)()
    for row in session.query(ExperienceModel).limit(4):
        print(row.to_experience().response_text)
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import JSON, Boolean, Float, Index, Integer, LargeBinary, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from trivium.core.experience import Experience


class Base(DeclarativeBase):
    pass


class ExperienceModel(Base):
    """One experience. Tensors are stored as little-endian bytes (see ``buffer.codec``)."""

    __tablename__ = "experiences"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    buffer: Mapped[str] = mapped_column(String(128), default="", index=False)
    eid: Mapped[str] = mapped_column(String(64), index=True)
    group_id: Mapped[str] = mapped_column(String(128), default="")
    episode_id: Mapped[str] = mapped_column(String(128), default="")
    task_id: Mapped[str] = mapped_column(String(256), default="")
    run_id: Mapped[int] = mapped_column(Integer, default=0)
    model_version: Mapped[int] = mapped_column(Integer, default=0)
    prompt_length: Mapped[int] = mapped_column(Integer)
    tokens: Mapped[bytes] = mapped_column(LargeBinary)  # int32
    logprobs: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)  # float32
    action_mask: Mapped[bytes] = mapped_column(LargeBinary)  # uint8
    reward: Mapped[float | None] = mapped_column(Float, nullable=True)
    advantages: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)  # float32
    returns: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)  # float32
    prompt_truncated: Mapped[bool] = mapped_column(Boolean, default=False)
    episode_truncated: Mapped[bool] = mapped_column(Boolean, default=False)
    prompt_text: Mapped[str | None] = mapped_column(Text, nullable=True)
    response_text: Mapped[str | None] = mapped_column(Text, nullable=True)
    info: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    use_count: Mapped[int] = mapped_column(Integer, default=0)
    priority: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[float] = mapped_column(Float, default=time.time)
    consumed: Mapped[bool] = mapped_column(Boolean, default=False)

    # Readers look for the oldest unconsumed rows of one buffer.
    __table_args__ = (Index("ix_experiences_buffer_consumed_id", "buffer", "consumed", "id"),)

    def to_experience(self) -> Experience:
        from trivium.buffer.codec import row_to_experience

        return row_to_experience(self)


class TaskModel(Base):
    """One taskset row, kept as JSON so any column layout fits."""

    __tablename__ = "tasks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    buffer: Mapped[str] = mapped_column(String(128), index=True)
    row: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[float] = mapped_column(Float, default=time.time)


class SFTDataModel(Base):
    """An SFT example: a prompt/response pair, or a whole ``messages`` conversation."""

    __tablename__ = "sft"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    buffer: Mapped[str] = mapped_column(String(128), index=True)
    prompt: Mapped[str | None] = mapped_column(Text, nullable=True)
    response: Mapped[str | None] = mapped_column(Text, nullable=True)
    messages: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[float] = mapped_column(Float, default=time.time)


class DPODataModel(Base):
    """A preference pair: one prompt, a chosen and a rejected answer (text or messages)."""

    __tablename__ = "dpo"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    buffer: Mapped[str] = mapped_column(String(128), index=True)
    prompt: Mapped[Any] = mapped_column(JSON)
    chosen: Mapped[Any] = mapped_column(JSON)
    rejected: Mapped[Any] = mapped_column(JSON)
    created_at: Mapped[float] = mapped_column(Float, default=time.time)


class BufferWriterModel(Base):
    """A producer of one buffer; readers stop once every registered producer has finished."""

    __tablename__ = "buffer_writers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    buffer: Mapped[str] = mapped_column(String(128), index=True)
    started_at: Mapped[float] = mapped_column(Float, default=time.time)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
