"""A Flask app (any WSGI server, threads included) on SQLAlchemy's Session and SyncQueue.

POST /signup writes a user row and enqueues the welcome mail in one transaction.

    DATABASE_URL=postgresql://localhost/shop VENTURI_PREFIX=venturi_ \\
        flask --app examples.flask_app run
"""

from __future__ import annotations

import os

from flask import Flask, abort, request
from sqlalchemy import String, create_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

import venturi

DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql://localhost/shop")
PREFIX = os.environ.get("VENTURI_PREFIX", "venturi_")

engine = create_engine(DATABASE_URL.replace("postgresql://", "postgresql+psycopg://", 1))


class Base(DeclarativeBase):
    pass


class User(Base):
    __tablename__ = f"{PREFIX}example_users"

    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(200), unique=True)


class SendWelcome(venturi.Task, kind="examples.send_welcome"):
    user_id: int
    email: str

    async def run(self, ctx: venturi.Context) -> str:
        return f"welcome sent to {self.email}"


def create_app(queue: venturi.SyncQueue) -> Flask:
    """The app, on a SyncQueue the process opened once (``SyncQueue.connect``) and
    shares between its request threads."""
    Base.metadata.create_all(engine)
    app = Flask(__name__)

    @app.post("/signup")
    def signup() -> tuple[dict[str, object], int]:
        email = (request.get_json(silent=True) or {}).get("email", "")
        with Session(engine) as session, session.begin():  # commit, or rollback on error
            user = User(email=email)
            session.add(user)
            session.flush()
            user_id = user.id
            job = queue.enqueue(SendWelcome(user_id=user_id, email=email), conn=session)
            if "@" not in email:
                abort(422)  # after the enqueue: the rollback takes the user and the job
        return {"user": user_id, "job": str(job.id)}, 201

    return app


if __name__ == "__main__":
    with venturi.SyncQueue.connect(DATABASE_URL, prefix=PREFIX) as shared:
        shared.migrate()
        create_app(shared).run()
