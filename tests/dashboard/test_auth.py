"""Who may use the dashboard: HTTP Basic, a bearer token, the ?token= link."""

from __future__ import annotations

import base64

import pytest

from portqueue import AsyncPortQueue
from portqueue.dashboard import create_app, serve
from tests.dashboard.conftest import BASE_URL, PASSWORD, TOKEN, USER, http_client

PAGES = ["/", "/jobs", "/jobs/new", "/schedules", "/static/style.css",
         "/jobs/0190a6f0-0000-7000-8000-000000000000"]
ACTIONS = ["/jobs/new", "/queues/pause", "/queues/resume",
           "/jobs/0190a6f0-0000-7000-8000-000000000000/retry"]


def basic(user: str, password: str) -> dict[str, str]:
    encoded = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {encoded}"}


async def test_basic_auth_is_required_on_every_page_and_action(apq: AsyncPortQueue) -> None:
    app = create_app(apq, auth=f"{USER}:{PASSWORD}")
    async with http_client(app) as client:
        for path in PAGES:
            refused = await client.get(path)
            assert refused.status_code == 401, path
            assert refused.headers["www-authenticate"].startswith("Basic ")
            assert "nosniff" in refused.headers["x-content-type-options"]
        for path in ACTIONS:
            assert (await client.post(path, data={"queue": "q"})).status_code == 401, path
        wrong = [basic(USER, "wrong"), basic("root", PASSWORD), basic(USER, PASSWORD + "x"),
                 {"Authorization": "Basic not-base64!"}, {"Authorization": f"Bearer {PASSWORD}"}]
        for headers in wrong:
            assert (await client.get("/", headers=headers)).status_code == 401, headers
        for path in PAGES[:-1]:
            assert (await client.get(path, headers=basic(USER, PASSWORD))).status_code == 200


async def test_bearer_token_and_token_link_become_a_session_cookie(apq: AsyncPortQueue) -> None:
    app = create_app(apq, token=TOKEN)
    async with http_client(app) as client:
        refused = await client.get("/")
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert (await client.get("/", headers={"Authorization": "Bearer nope-nope"})
                ).status_code == 401
        assert (await client.get("/?token=nope-nope")).status_code == 401
        assert (await client.get("/", headers={"Authorization": f"Bearer {TOKEN}"})
                ).status_code == 200

        # The link's token is swapped for a cookie and removed from the address.
        exchanged = await client.get(f"/jobs?queue=a&token={TOKEN}")
        assert exchanged.status_code == 303
        assert exchanged.headers["location"] == "/jobs?queue=a"
        assert TOKEN not in exchanged.headers["set-cookie"]
        assert "HttpOnly" in exchanged.headers["set-cookie"]
        assert (await client.get("/jobs?queue=a")).status_code == 200  # the cookie alone

    async with http_client(app) as fresh:
        # Never a redirect to another host, whatever the path looks like.
        odd_path = await fresh.get(f"{BASE_URL}//evil.test/x?token={TOKEN}")
        assert odd_path.headers["location"] == "/evil.test/x"

    async with http_client(app, cookies={"portqueue_session": "forged"}) as forger:
        assert (await forger.get("/")).status_code == 401


def test_bad_auth_settings_are_refused_before_serving() -> None:
    for auth in ["no-colon", ":password", "user:"]:
        with pytest.raises(ValueError, match="auth"):
            serve(dsn="postgresql://unused", auth=auth)
    with pytest.raises(ValueError, match="token"):
        serve(dsn="postgresql://unused", token="short")
    with pytest.raises(ValueError, match="port"):
        serve(dsn="postgresql://unused", port=70_000)
    with pytest.raises(ValueError, match="schema"):
        serve(dsn="postgresql://unused", schema="bad schema")


async def test_without_credentials_configured_it_is_open(apq: AsyncPortQueue) -> None:
    async with http_client(create_app(apq)) as client:
        response = await client.get("/")
    assert response.status_code == 200
    assert "set-cookie" in response.headers  # the CSRF cookie still guards its forms
