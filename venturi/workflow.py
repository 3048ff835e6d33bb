"""Workflows: a DAG of tasks enqueued at once, each step after the steps it names.

docs/concepts/workflows.md. A :class:`Workflow` is a builder: nothing touches the
database until ``queue.enqueue_workflow(wf)``, which checks the whole graph first
(every ``after`` names a step of this workflow or an existing job id; no cycle) and
then writes every step and the workflow's record in one transaction.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from ._ids import uuid7
from .store.checks import find_cycle
from .store.records import JobRecord
from .store.statuses import Status
from .task import Task

StepRef = "Step | str | UUID"


@dataclass(frozen=True, slots=True, eq=False)
class Step:
    """A step of one workflow: its job's id is fixed when it is added."""

    workflow: Workflow
    name: str
    id: UUID


@dataclass(slots=True)
class _Entry:
    step: Step
    task: Task | tuple[str, Mapping[str, Any]]
    after: list[Step | str | UUID]
    after_failure: str
    priority: Any


class Workflow:
    """``wf = Workflow("ingest"); a = wf.add(Embed(...)); wf.add(Index(...), after=[a])``.

    ``after`` names steps by their handle (what ``add`` returned) or their name (a step
    added later may be named too: ``add(..., name="index")``), or an existing job by id.
    Step names are unique in a workflow; unnamed steps are numbered ``step-1``, ...
    """

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValueError("a workflow needs a name")
        self.name = name
        self._entries: list[_Entry] = []
        self._names: dict[str, Step] = {}

    def add(self, task: Task | tuple[str, Mapping[str, Any]], *,
            after: Sequence[Step | str | UUID] = (), after_failure: str = "fail",
            name: str | None = None, priority: Any = None) -> Step:
        """Add a step running ``task`` once every step (or job) of ``after`` completed;
        a failed one fails it (``dependency-failed``) unless ``after_failure="run"``."""
        if isinstance(after, str | Step | UUID):
            raise ValueError("after= takes a list of steps")
        label = name if name is not None else f"step-{len(self._entries) + 1}"
        if not isinstance(label, str) or not label:
            raise ValueError("a step name must be a non-empty string")
        if label in self._names:
            raise ValueError(f"workflow {self.name!r} already has a step named {label!r}")
        step = Step(self, label, uuid7())
        self._names[label] = step
        self._entries.append(_Entry(step, task, list(after), after_failure, priority))
        return step

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def steps(self) -> list[Step]:
        return [e.step for e in self._entries]

    def resolved(self) -> list[tuple[Step, Task | tuple[str, Mapping[str, Any]], list[UUID],
                                     str, Any]]:
        """Every step with the ids it waits for, checked: a ``ValueError`` for an unknown
        step, a step of another workflow, or a cycle (before anything is written)."""
        if not self._entries:
            raise ValueError(f"workflow {self.name!r} has no steps")
        out = []
        for e in self._entries:
            ids: list[UUID] = []
            for ref in e.after:
                if isinstance(ref, Step):
                    if ref.workflow is not self:
                        raise ValueError(f"step {e.step.name!r} waits for step {ref.name!r} "
                                         f"of another workflow ({ref.workflow.name!r})")
                    ids.append(ref.id)
                elif isinstance(ref, str):
                    found = self._names.get(ref)
                    if found is None:
                        raise ValueError(f"step {e.step.name!r} waits for unknown step {ref!r}")
                    ids.append(found.id)
                elif isinstance(ref, UUID):
                    ids.append(ref)
                else:
                    raise ValueError(f"step {e.step.name!r}: after= takes steps, step names "
                                     f"or job ids, not {type(ref).__name__}")
            out.append((e.step, e.task, list(dict.fromkeys(ids)), e.after_failure, e.priority))
        by_id = {step.id: step for step, *_ in out}
        cycle = find_cycle({step.id: ids for step, _, ids, *_ in out})
        if cycle is not None:
            names = " -> ".join(by_id[i].name for i in cycle if isinstance(i, UUID))
            raise ValueError(f"workflow {self.name!r} has a cycle: {names}")
        return out


@dataclass(frozen=True, slots=True)
class StepState:
    """One step of an enqueued workflow as it is now: ``job`` None once it is gone
    (cancelled, or cleaned up)."""

    name: str
    id: UUID
    after: list[UUID]
    job: JobRecord | None

    @property
    def status(self) -> Status | None:
        return None if self.job is None else self.job.status

    @property
    def duration(self) -> dt.timedelta | None:
        """From creation to finish, for a finished step."""
        job = self.job
        if job is None or job.finished_at is None:
            return None
        return job.finished_at - job.created_at


@dataclass(frozen=True, slots=True)
class WorkflowState:
    """What ``queue.workflow(id)`` returns: every step's state, in the order added."""

    id: UUID
    name: str
    created_at: dt.datetime
    steps: list[StepState] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """How many steps are in each status (``gone`` for steps no longer there)."""
        out: dict[str, int] = {}
        for s in self.steps:
            key = "gone" if s.status is None else s.status.value
            out[key] = out.get(key, 0) + 1
        return out
