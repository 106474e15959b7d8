"""The job kinds, declared once: one ``JobKind`` row per kind in ``JOB_KINDS``, plus the ``MAINTENANCE`` tasks.

Tasks, routes, parsing, keyword arguments, dispatch, Flower's summary and coalescing derive from the rows; how to
add a kind: docs/jobs.md ("Job kinds").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Annotated, Any, Union

from pydantic import Field, TypeAdapter

from memory_core._model import ContractModel
from memory_core.errors import ConfigError, InvalidRequest
from memory_core.lifecycle.jobs import BuildBeliefs, IngestBrain, parse_tagged
from memory_core.settings import Settings
from memory_core.tools.jobs import ToolWrite
from workers.coordination import MAX_JOB_ID_CHARS, check_job_id, new_job_id
from workers.handlers import (
    BuildScopes,
    EmbedItems,
    run_build,
    run_build_due,
    run_build_scopes,
    run_compact_log,
    run_drain,
    run_embed,
    run_embed_due,
    run_ingest,
    run_retention,
    run_tool_write,
)

if TYPE_CHECKING:  # types only: workers.execution imports this module
    from workers.execution import Delivery, Runtime

__all__ = [
    "JOB_KINDS",
    "MAX_JOB_ID_CHARS",
    "MAINTENANCE",
    "MAINTENANCE_QUEUE",
    "JobKind",
    "JobKinds",
    "Maintenance",
    "check_job_id",
    "new_job_id",
]

MAINTENANCE_QUEUE = "queue_maintenance"  # the Settings field of beat's queue (and Celery's default)
JOB_KWARGS = frozenset({"engine"})  # the host's engine_key; a coalescing kind's job carries COALESCE_KWARGS too
# ``pending`` names the job's pending mark; ``triggered_us`` is read from messages queued before the claim's stamp
# moved to the job's ``stamp`` mark (docs/jobs.md, "Migration notes"); no submit writes it now
COALESCE_KWARGS = frozenset({"triggered_us", "pending"})

JobHandler = Callable[["Runtime", "Delivery", Any], dict[str, Any]]
TaskHandler = Callable[["Runtime", "Delivery"], dict[str, Any]]  # a maintenance task: no job


@dataclass(frozen=True)
class JobKind:
    """One kind of background job, one row of ``JOB_KINDS``: its columns are docs/jobs.md's ("Adding a kind").

    ``queue`` names a ``Settings`` field (``queue_beliefs`` …); ``describe`` fills Flower's args column.
    """

    model: type[ContractModel]
    task: str
    queue: str
    handler: JobHandler
    describe: Callable[[Any], str]
    coalesce: bool = False

    @property
    def tag(self) -> str:
        """The ``"job"`` tag of the model (``build_beliefs``)."""
        default = self.model.model_fields["job"].default
        if not isinstance(default, str):
            raise ConfigError(f"job model {self.model.__name__} has no default 'job' tag")
        return default

    @property
    def kwargs(self) -> frozenset[str]:
        """The keyword arguments a message of this kind may carry."""
        return JOB_KWARGS | (COALESCE_KWARGS if self.coalesce else frozenset())


@dataclass(frozen=True)
class Maintenance:
    """A task beat sends that carries no job: its handler and the (optional) keyword arguments it takes."""

    task: str
    handler: TaskHandler
    kwargs: frozenset[str]
    queue: str = MAINTENANCE_QUEUE


MAINTENANCE: tuple[Maintenance, ...] = (
    Maintenance("memory.build_due", run_build_due, frozenset({"reach"})),
    Maintenance("memory.drain_outbox", run_drain, frozenset({"limit"})),
    Maintenance("memory.retention", run_retention, frozenset({"root", "dry_run"})),
    Maintenance("memory.embed_due", run_embed_due, frozenset()),
    Maintenance("memory.compact_log", run_compact_log, frozenset({"keep"})),
)
"""The maintenance tasks (``beat_schedule.ENTRIES`` sends them)."""


@dataclass(frozen=True)
class JobKinds:
    """The table of job kinds; immutable, so one table serves every thread.

    Raises:
        ConfigError: two rows with one tag or one task name, or a task name a maintenance task has.
    """

    rows: tuple[JobKind, ...]
    maintenance: tuple[Maintenance, ...] = MAINTENANCE
    _by_task: dict[str, JobKind] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = {row.task for row in self.rows} | {m.task for m in self.maintenance}
        if len(self.tags) != len(self.rows) or len(names) != len(self.rows) + len(self.maintenance):
            raise ConfigError("job kinds need distinct tags and task names")
        object.__setattr__(self, "_by_task", {row.task: row for row in self.rows})

    def __iter__(self) -> Iterator[JobKind]:
        return iter(self.rows)

    def with_kind(self, row: JobKind) -> JobKinds:
        """This table with one more row.

        Raises:
            ConfigError: its tag or task name is taken.
        """
        return JobKinds((*self.rows, row), self.maintenance)

    @cached_property
    def tags(self) -> frozenset[str]:
        """Every kind's ``"job"`` tag."""
        return frozenset(row.tag for row in self.rows)

    def of_task(self, task: str) -> JobKind | None:
        """The kind a task runs, or None (a maintenance or unknown task)."""
        return self._by_task.get(task)

    def maintenance_task(self, task: str) -> Maintenance | None:
        """The maintenance task of that name, or None."""
        return next((m for m in self.maintenance if m.task == task), None)

    def of(self, job: ContractModel) -> JobKind:
        """The kind of a parsed job.

        Raises:
            InvalidRequest: ``field="job"``: not a job of any kind of this table.
        """
        for row in self.rows:
            if type(job) is row.model:
                return row
        raise InvalidRequest(f"{type(job).__name__} is not a job kind", field="job")

    def queues(self) -> dict[str, str]:
        """Task name → the ``Settings`` field naming its queue, for every task (kinds and maintenance)."""
        out = {row.task: row.queue for row in self.rows}
        out.update({m.task: m.queue for m in self.maintenance})
        return out

    @cached_property
    def _adapter(self) -> TypeAdapter[Any]:
        models = tuple(row.model for row in self.rows)
        if len(models) == 1:
            return TypeAdapter(models[0])
        union: Any = Annotated[Union[models], Field(discriminator="job")]  # noqa: UP007  (built from the table)
        return TypeAdapter(union)

    def parse(self, value: Any) -> ContractModel:
        """A job of one of the kinds, from a model, a JSON object or JSON text.

        Raises:
            InvalidRequest: not a job, an unknown ``job`` tag, or a malformed field (named).
        """
        if isinstance(value, ContractModel) and any(type(value) is row.model for row in self.rows):
            return value
        return parse_tagged(self._adapter, value, self.tags)  # type: ignore[no-any-return]

    def describe(self, job: ContractModel) -> str:
        """The job's summary for Flower (its kind's ``describe``)."""
        return self.of(job).describe(job)


def queue_name(settings: Settings, attr: str) -> str:
    """The queue name ``Settings.<attr>`` holds.

    Raises:
        ConfigError: no such setting.
    """
    value = getattr(settings, attr, None)
    if not isinstance(value, str):
        raise ConfigError(f"no queue setting {attr!r}")
    return value


JOB_KINDS = JobKinds(
    (
        JobKind(BuildBeliefs, "memory.build_beliefs", "queue_beliefs", run_build, BuildBeliefs.describe, coalesce=True),
        JobKind(IngestBrain, "memory.ingest_brain", "queue_ingest", run_ingest, IngestBrain.describe),
        JobKind(ToolWrite, "memory.tool_write", "queue_ingest", run_tool_write, ToolWrite.describe),
        JobKind(EmbedItems, "memory.embed_items", "queue_beliefs", run_embed, EmbedItems.describe, coalesce=True),
        JobKind(
            BuildScopes, "memory.build_scopes", "queue_beliefs", run_build_scopes, BuildScopes.describe, coalesce=True
        ),
    )
)
