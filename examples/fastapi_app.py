"""A FastAPI app on SQLAlchemy's AsyncSession that enqueues in its own transaction.

POST /orders writes an order row and enqueues the job that sends its receipt, in
one transaction: both commit together, or (the request fails) neither exists.

    DATABASE_URL=postgresql://localhost/shop VENTURI_PREFIX=venturi_ \\
        uvicorn examples.fastapi_app:app
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Request
from pydantic import BaseModel
from sqlalchemy import String
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

import venturi

DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql://localhost/shop")
PREFIX = os.environ.get("VENTURI_PREFIX", "venturi_")

engine = create_async_engine(DATABASE_URL.replace("postgresql://", "postgresql+asyncpg://", 1))
sessions = async_sessionmaker(engine, expire_on_commit=False)


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = f"{PREFIX}example_orders"

    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(200))


class SendReceipt(venturi.Task, kind="examples.send_receipt"):
    order_id: int
    email: str

    def subject(self) -> str | None:
        return f"order/{self.order_id}"

    async def run(self, ctx: venturi.Context) -> str:
        return f"receipt sent to {self.email}"


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
    async with venturi.Queue.connect(DATABASE_URL, prefix=PREFIX) as queue:
        await queue.migrate()
        app.state.queue = queue
        yield
    await engine.dispose()


app = FastAPI(lifespan=lifespan)


async def session() -> AsyncIterator[AsyncSession]:
    async with sessions() as s:
        yield s


def queue(request: Request) -> venturi.Queue:
    q: venturi.Queue = request.app.state.queue
    return q


class NewOrder(BaseModel):
    email: str


@app.post("/orders")
async def create_order(order: NewOrder, session: Annotated[AsyncSession, Depends(session)],
                       queue: Annotated[venturi.Queue, Depends(queue)]) -> dict[str, object]:
    async with session.begin():  # commits at the end of the block, rolls back on an error
        row = Order(email=order.email)
        session.add(row)
        await session.flush()  # the row's id, for the job's payload
        job = await queue.enqueue(SendReceipt(order_id=row.id, email=row.email), conn=session)
        if not order.email.partition("@")[2]:
            # Fails after the enqueue: the rollback takes the order and its job.
            raise HTTPException(422, "the email has no domain")
    return {"order": row.id, "job": str(job.id)}
