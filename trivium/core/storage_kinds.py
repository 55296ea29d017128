"""Storage kinds: what each ``storage_type`` can do (its traits) and how to open it.

Owns the registry of storage kinds. A kind is registered once, with its traits and its
factories; the buffer factory, config validation and the placements ask the traits, never
the name. Factories are callables or ``"package.module:name"`` paths imported on first use,
so importing this module (as ``trivium plan`` does) loads neither the storages nor
SQLAlchemy. It must not import the storages themselves.

A new storage is its own module plus one ``register_storage_kind(StorageKind(...))``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trivium.errors import UserError
from trivium.registry import import_object

# A factory: a callable, or the "package.module:name" path of one.
Factory = Callable[..., Any] | str


@dataclass(frozen=True)
class StorageKind:
    """One ``storage_type``.

    Traits:
    ``durable``: what was written survives the process that wrote it.
    ``shared_across_processes``: writers and readers in different processes of one run see
    the same data (a kind that is shared but not durable is kept in a host process).
    ``holds_datasets``: rows can be read as a taskset or an SFT/DPO dataset (``load_rows``).
    ``replayable``: can back a replay buffer (``replay_buffer.enable``).
    ``needs_path``: cannot be opened without ``path``.
    ``trainer_reads_experiences``: a trainer reading it alone reads the experiences an
    explorer wrote there; False: it reads the rows as a dataset, and what an explorer writes
    there is for inspection only.
    ``keeps_experiences``: where the experiences browser finds a run's experiences:
    ``"database"`` (``path`` is the database), ``"mirror"`` (``path``, when given, is a
    ``.jsonl`` or database copy) or None (not browsable).

    Factories take the ``StorageConfig``: ``writer`` and ``reader`` open the experience
    writer and reader; ``load_rows`` returns the dataset rows (a ``LoadedRows``);
    ``count_rows`` counts them cheaply or returns None.
    """

    name: str
    durable: bool
    shared_across_processes: bool
    holds_datasets: bool
    replayable: bool
    needs_path: bool
    trainer_reads_experiences: bool
    writer: Factory
    reader: Factory
    load_rows: Factory | None = None
    count_rows: Factory | None = None
    keeps_experiences: str | None = None
    summary: str = ""

    def __post_init__(self) -> None:
        if self.holds_datasets and self.load_rows is None:
            raise ValueError(f"storage kind '{self.name}' holds datasets but gives no load_rows")
        if self.keeps_experiences not in (None, "database", "mirror"):
            raise ValueError(
                f"storage kind '{self.name}': keeps_experiences must be database, mirror or None"
            )

    def open_writer(self, config: Any) -> Any:
        return _resolve(self.writer)(config)

    def open_reader(self, config: Any) -> Any:
        return _resolve(self.reader)(config)

    def rows(self, config: Any) -> Any:
        if self.load_rows is None:
            raise UserError(f"Storage '{config.name}': storage_type {self.name} holds no dataset rows.")
        return _resolve(self.load_rows)(config)

    def row_count(self, config: Any) -> int | None:
        return None if self.count_rows is None else _resolve(self.count_rows)(config)


def _resolve(factory: Factory) -> Callable[..., Any]:
    return import_object(factory) if isinstance(factory, str) else factory


_KINDS: dict[str, StorageKind] = {}
# The registered names, in registration order; the schema's choice list for
# ``storage_type`` is this very list, so it admits kinds registered later too.
STORAGE_KIND_NAMES: list[str] = []


def register_storage_kind(kind: StorageKind) -> StorageKind:
    """Make ``kind`` usable as ``storage_type: <kind.name>``; registering a name again replaces it."""
    if kind.name not in _KINDS:
        STORAGE_KIND_NAMES.append(kind.name)
    _KINDS[kind.name] = kind
    return kind


def unregister_storage_kind(name: str) -> None:
    """Forget the kind ``name`` (a plugin unloaded); unknown names are ignored."""
    if _KINDS.pop(name, None) is not None:
        STORAGE_KIND_NAMES.remove(name)


def storage_kind(storage_type: str, *, key: str = "storage_type") -> StorageKind:
    """The kind named ``storage_type``; a UserError naming ``key`` and the choices otherwise."""
    kind = _KINDS.get(str(storage_type).lower())
    if kind is None:
        raise UserError(
            f"{key}: unknown storage_type {storage_type!r}; choose one of {', '.join(STORAGE_KIND_NAMES)}."
        )
    return kind


def kinds_with(trait: str) -> list[str]:
    """Names of the kinds whose ``trait`` is true, for error messages."""
    return [name for name, kind in _KINDS.items() if getattr(kind, trait)]


register_storage_kind(
    StorageKind(
        name="file",
        summary="A dataset directory or file; experiences written as JSON lines, for inspection.",
        durable=True,
        shared_across_processes=True,
        holds_datasets=True,
        replayable=False,
        needs_path=True,
        trainer_reads_experiences=False,
        writer="trivium.buffer.file_storage:open_file_writer",
        reader="trivium.buffer.file_storage:open_file_reader",
        load_rows="trivium.buffer.task_source:load_file_rows",
        count_rows="trivium.config.taskset_size:count_file_rows",
    )
)
register_storage_kind(
    StorageKind(
        name="queue",
        summary="In memory, read as written; kept in a host process when the run has several.",
        durable=False,
        shared_across_processes=True,
        holds_datasets=False,
        replayable=True,
        needs_path=False,
        trainer_reads_experiences=True,
        keeps_experiences="mirror",
        writer="trivium.buffer.queue_storage:open_queue_writer",
        reader="trivium.buffer.queue_storage:open_queue_reader",
    )
)
register_storage_kind(
    StorageKind(
        name="sql",
        summary="A database (SQLite file or SQLAlchemy URL) every process of the run reaches.",
        durable=True,
        shared_across_processes=True,
        holds_datasets=True,
        replayable=False,
        needs_path=True,
        trainer_reads_experiences=True,
        keeps_experiences="database",
        writer="trivium.buffer.sql_storage:open_sql_writer",
        reader="trivium.buffer.sql_storage:open_sql_reader",
        load_rows="trivium.buffer.task_source:load_sql_rows",
        count_rows="trivium.config.taskset_size:count_sql_rows",
    )
)
