"""A worker's admission: its connections at start, all or none.

While the server has no connection free (``server_full``) the worker waits,
says so once, and tries again with a jittered backoff; another failure (no
server yet, a wrong password) is retried for ``START_SECONDS``, as a pool
would, then raised. It holds none of its connections while it waits: two
workers each holding part of what they need would otherwise wait on each
other forever.
"""

from __future__ import annotations

import asyncio
import logging
import random

import psycopg
from psycopg_pool import PoolTimeout

from portqueue.availability import server_full
from portqueue.worker.connections import Connections, one_line
from portqueue.worker.stopping import Stopping

log = logging.getLogger("portqueue.worker")

# Waiting for a full server at start: the delay doubles up to this, jittered
# so that workers started together do not all retry at the same instant.
ADMISSION_MAX_SECONDS = 10.0
# How long a worker keeps trying at start when connecting fails for another
# reason (no server yet, a wrong password) before start() raises.
START_SECONDS = 30.0
# How long the pool may take to open its first connection during admission
# before the attempt counts as "the server is full" and starts over.
POOL_OPEN_SECONDS = 5.0


async def admit(connections: Connections, worker_id: str, *, claims: bool, listener: bool,
                stopping: Stopping) -> bool:
    """Open the claim session, the LISTEN session and the pool (those the
    worker needs). False if stop was requested while waiting (nothing is open
    then)."""
    waited_since: float | None = None
    failures = 0
    loop = asyncio.get_running_loop()
    started = loop.time()
    while True:
        try:
            if claims:
                await connections.claims.connect()
            if listener:
                connections.first_listener = await connections.connect("listener")
            # The pool retries a refused connect by itself, logging each try,
            # and its PoolTimeout says neither why nor soon: a direct connect
            # first answers at once (the slot it frees is the pool's, barring
            # another process taking it meanwhile).
            await connections.discard(await connections.connect("worker"))
            await connections.pool.open(wait=True, timeout=POOL_OPEN_SECONDS)
        except (psycopg.Error, PoolTimeout) as exc:
            await connections.close_all()
            failures += 1
            delay = min(0.5 * 2 ** failures, ADMISSION_MAX_SECONDS)
            if server_full(exc, reached=connections.reached) or isinstance(exc, PoolTimeout):
                if waited_since is None:
                    waited_since = loop.time()
                    log.warning(
                        "worker %s: the database has no connection free for it (%s); "
                        "waiting for %d, retrying every %.0f s at most", worker_id,
                        one_line(exc), connections.budget, ADMISSION_MAX_SECONDS)
                # Jittered: workers refused together do not retry together.
                delay *= random.uniform(0.5, 1.0)
            else:
                left = START_SECONDS - (loop.time() - started)
                if left <= 0:
                    raise
                delay = min(delay, left)
                # Each try is said: an operator watching a worker that cannot
                # reach its database sees why, and for how long.
                log.warning("worker %s: could not connect to the database (%s); "
                            "retrying in %.1f s, for %.0f s more", worker_id,
                            one_line(exc), delay, left)
            await stopping.sleep(delay)
            if stopping():
                return False
            continue
        if waited_since is not None:
            log.info("worker %s: got its connections after waiting %.0f s", worker_id,
                     loop.time() - waited_since)
        return True
