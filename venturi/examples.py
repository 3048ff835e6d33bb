"""Example tasks: what ``venturi dev`` and the container image run.

    venturi worker --app venturi.examples

A small document pipeline: ``Embed`` chunks and vectorises a document, ``Summarize``
condenses it (coalescing duplicate requests), ``Reindex`` works through a whole collection
in batches, pausing between them, and ``Sweep`` periodically evicts stale vectors.

Nothing here touches the network or the disk: a document's text is derived from its URI
and the "model" is a hashing trick, so every run is deterministic and takes milliseconds
(``latency_ms`` stands in for a model call when a demo should be watchable). The vectors land
in ``INDEX``, a process-local stand-in for a vector database: replace ``document()`` and
``INDEX`` with your own storage to turn these into real tasks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .task import Context, GiveUp, Keep, Merge, Pause, Priority, Task, With

DIMS = 16
CHUNK_WORDS = 40
SUPPORTED = (".txt", ".md", ".html")
_WORDS = (
    "queue", "worker", "lease", "journal", "carry", "payload", "postgres", "durable", "retry",
    "settle", "claim", "drain", "subject", "tenant", "index", "vector", "summary", "document",
    "batch", "pause", "merge", "signal", "replica",
)


def document(uri: str, words: int = 200) -> str:
    """The text stored at ``uri``: deterministic pseudo-prose, sentences of eight words."""
    seed = hashlib.sha256(uri.encode()).digest()
    picked = [_WORDS[(seed[i % len(seed)] + i * 7) % len(_WORDS)] for i in range(words)]
    sentences = [" ".join(picked[i:i + 8]).capitalize() + "." for i in range(0, words, 8)]
    return " ".join(sentences)


def vectorise(text: str) -> tuple[float, ...]:
    """A unit vector of ``DIMS`` floats (the hashing trick, standing in for a model)."""
    counts = [0.0] * DIMS
    for word in text.lower().split():
        counts[int.from_bytes(hashlib.blake2b(word.encode(), digest_size=2).digest()) % DIMS] += 1
    norm = math.sqrt(sum(c * c for c in counts)) or 1.0
    return tuple(c / norm for c in counts)


@dataclass(frozen=True, slots=True)
class Indexed:
    vectors: tuple[tuple[float, ...], ...]
    model: str
    stored_at: float  # time.time()


class VectorIndex:
    """A process-local map of URI to vectors (a real deployment would use a database)."""

    def __init__(self) -> None:
        self._entries: dict[str, Indexed] = {}

    def put(self, uri: str, entry: Indexed) -> None:
        self._entries[uri] = entry

    def get(self, uri: str) -> Indexed | None:
        return self._entries.get(uri)

    def evict_older_than(self, cutoff: float) -> int:
        stale = [uri for uri, e in self._entries.items() if e.stored_at < cutoff]
        for uri in stale:
            del self._entries[uri]
        return len(stale)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


INDEX = VectorIndex()


async def _model_call(latency_ms: int) -> None:
    if latency_ms > 0:
        await asyncio.sleep(latency_ms / 1000)


def _embed_document(uri: str, model: str) -> int:
    words = document(uri).split()
    chunks = [" ".join(words[i:i + CHUNK_WORDS]) for i in range(0, len(words), CHUNK_WORDS)]
    INDEX.put(uri, Indexed(tuple(vectorise(c) for c in chunks), model, time.time()))
    return len(chunks)


class Embed(Task, kind="examples.embed", lease=timedelta(seconds=30), max_failures=5):
    """Chunk one document and store a vector per chunk.

    Idempotent (a job can run twice after a crash: docs/concepts/idempotency.md):
    re-embedding overwrites the same index entry. A format the model cannot read is not
    worth retrying: ``GiveUp`` sends the job straight to dead with the reason as its
    journal note.
    """

    uri: str
    model: str = "hash-16"
    latency_ms: int = 0

    def subject(self) -> str | None:
        return self.uri

    async def run(self, ctx: Context) -> str:
        if not self.uri.endswith(SUPPORTED):
            raise GiveUp("unsupported-format")
        await _model_call(self.latency_ms)
        chunks = _embed_document(self.uri, self.model)
        ctx.attach(chunks=chunks, dims=DIMS, model=self.model)
        return f"{chunks} chunks"


class Summarize(Task, kind="examples.summarize", priority=Priority.LOW):
    """Summarize a document in at most ``words`` words.

    Requests for the same document coalesce while one is pending (``dedup_key``): a
    request for a longer summary raises the pending job's length, a shorter one is
    absorbed, so a burst of edits costs one summary, not one per edit.
    """

    uri: str
    words: int = 30
    latency_ms: int = 0

    def subject(self) -> str | None:
        return self.uri

    def dedup_key(self) -> str | None:
        return self.uri

    def merge(self, pending: Summarize, carry: Any) -> Merge:
        if self.words <= pending.words:
            return Keep()
        return With(dataclasses.replace(pending, words=self.words), carry=carry)

    async def run(self, ctx: Context) -> str:
        await _model_call(self.latency_ms)
        summary: list[str] = []
        for sentence in document(self.uri).split(". "):
            words = sentence.split()
            if len(summary) + len(words) > self.words:
                break
            summary.extend(words)
        ctx.attach(words=len(summary))
        return f"{len(summary)} words"


class Reindex(Task, kind="examples.reindex", lease=timedelta(seconds=30)):
    """Re-embed a collection (``{collection}/0.txt`` ... ) one batch per run.

    After each batch it pauses with its position in ``carry``: the slot is free for other
    work between batches, a drain waits for one batch at most, and a crash repeats one
    batch, not the whole collection. Pauses do not count as failures.
    """

    collection: str
    documents: int = 20
    batch: int = 5
    latency_ms: int = 0

    def subject(self) -> str | None:
        return self.collection

    async def run(self, ctx: Context) -> str | Pause:
        done = int((ctx.carry or {}).get("done", 0))
        end = min(done + self.batch, self.documents)
        for n in range(done, end):
            await _model_call(self.latency_ms)
            _embed_document(f"{self.collection.rstrip('/')}/{n}.txt", "hash-16")
        ctx.attach(batch_start=done, batch_end=end)
        if end < self.documents:
            return Pause(timedelta(0), carry={"done": end})
        return f"reindexed {self.documents} documents in {ctx.run_no} runs"


class Sweep(Task, kind="examples.sweep", every=timedelta(minutes=1)):
    """Evict vectors older than ``max_age_seconds`` (a periodic task).

    Workers keep exactly one occurrence pending; settling it schedules the next tick, so
    however many workers run, the sweep runs once a minute.
    """

    max_age_seconds: float = 3600.0

    async def run(self, ctx: Context) -> str:
        evicted = INDEX.evict_older_than(time.time() - self.max_age_seconds)
        ctx.attach(evicted=evicted, kept=len(INDEX))
        return f"evicted {evicted}"


TASKS: tuple[type[Task], ...] = (Embed, Summarize, Reindex, Sweep)


def demo_batch(jobs: int = 40, *, latency_ms: int = 0) -> list[Task]:
    """About ``jobs`` tasks for a demo: mostly embeds, summaries with duplicates that
    coalesce, and one reindex that pauses between batches."""
    if jobs < 1:
        raise ValueError("jobs must be at least 1")
    batch: list[Task] = [Reindex(collection="file:///demo/archive", documents=12, batch=4,
                                 latency_ms=latency_ms)]
    for n in range(jobs - 1):
        if n % 4 == 3:
            # Summaries come in pairs for one document, the second asking for more words:
            # the pair merges into one job (dedup), which then writes the longer summary.
            batch.append(Summarize(uri=f"file:///demo/docs/{n // 8}.md",
                                   words=30 if n % 8 == 7 else 20, latency_ms=latency_ms))
        else:
            batch.append(Embed(uri=f"file:///demo/docs/{n}.txt", latency_ms=latency_ms))
    return batch


def kinds(tasks: Sequence[type[Task]] = TASKS) -> list[str]:
    return [t.__task__.kind for t in tasks]
