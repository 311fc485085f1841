"""A FastAPI app with portqueue: the worker runs in the app's lifespan, an
endpoint enqueues inside its SQLAlchemy transaction, the dashboard is mounted.

Run it with ``PORTQUEUE_DSN=postgresql://... uvicorn fastapi_app:app``
(after ``portqueue migrate``); tests/integration/test_fastapi_recipe.py runs
it with FastAPI's TestClient.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
from fastapi import FastAPI
from pydantic import BaseModel
from sqlalchemy import text
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from portqueue import AsyncPortQueue
from portqueue.dashboard import create_app as dashboard_app
from portqueue.tx import from_sqlalchemy

DSN = os.environ["PORTQUEUE_DSN"]
pq = AsyncPortQueue(DSN, schema=os.environ.get("PORTQUEUE_SCHEMA", "portqueue"))
# SQLAlchemy on psycopg, connecting with the same DSN (a URL or key=value).
engine = create_async_engine("postgresql+psycopg://",
                             async_creator=lambda: psycopg.AsyncConnection.connect(DSN))
Session = async_sessionmaker(engine, expire_on_commit=False)


@pq.task(queue="welcome-emails", retry={"max_attempts": 3})
async def send_welcome(user_id: int, email: str) -> dict[str, str]:
    # Your mailer here; the return value is stored as the job's output.
    return {"sent_to": email}


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with engine.begin() as conn:  # your migrations would do this
        await conn.execute(text(
            "CREATE TABLE IF NOT EXISTS signups (id serial PRIMARY KEY, email text NOT NULL)"))
    await pq.start()  # the worker, on the app's event loop
    try:
        yield
    finally:
        await pq.stop()  # running jobs finish first (up to grace_seconds)
        await pq.aclose()
        await engine.dispose()


app = FastAPI(lifespan=lifespan)
app.mount("/portqueue", dashboard_app(pq))


class Signup(BaseModel):
    email: str


@app.post("/signups")
async def sign_up(signup: Signup) -> dict[str, object]:
    async with Session.begin() as session:  # commits both rows, or neither
        user_id = (await session.execute(
            text("INSERT INTO signups (email) VALUES (:email) RETURNING id"),
            {"email": signup.email})).scalar_one()
        added = await send_welcome.configure(tx=from_sqlalchemy(session)).add(
            user_id=user_id, email=signup.email)
    return {"user_id": user_id, "job_id": added.job_id}
