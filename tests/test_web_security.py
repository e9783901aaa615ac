"""The dashboard's gatekeepers are libraries: Starlette's TrustedHostMiddleware, itsdangerous."""

from __future__ import annotations

import asyncio
import time

import itsdangerous
import pytest
from starlette.testclient import TestClient

from drover.app import App
from drover.config import load_config
from drover.web import create_app
from drover.web.security import COOKIE_NAME, LOGIN_MAX_AGE

TOKEN = "s3cret-token"


@pytest.fixture
def client_for(database, monkeypatch, tmp_path):
    """A TestClient for a dashboard bound to ``host`` over an upgraded database."""
    monkeypatch.chdir(tmp_path)
    flags = {"database_url": database.url, "database_schema": database.schema or ""}

    async def upgrade() -> None:
        app = App(load_config(None, environ={}, flags=flags))
        try:
            await app.upgrade()
        finally:
            await app.close()

    asyncio.run(upgrade())

    def factory(**kwargs):
        app = App(load_config(None, environ={}, flags=flags))
        web = create_app(app, close_app_on_shutdown=True, **kwargs)
        return TestClient(web, base_url="http://127.0.0.1:8080")

    return factory


@pytest.mark.parametrize("host", ["localhost:abc", "127.0.0.1:8080:9", "local host"])
def test_a_malformed_host_header_is_refused(client_for, host):
    """Starlette parses the Host header: a bad port or a space is no host at all."""
    with client_for() as client:
        response = client.get("/healthz", headers={"Host": host})
    assert response.status_code == 400
    assert "does not answer to the host" in response.text
    assert "--allowed-host" in response.text


def test_the_login_cookie_is_signed_and_expires(client_for, monkeypatch):
    """The cookie holds a signed timestamp: it lasts LOGIN_MAX_AGE, then a new login is needed."""
    with client_for(auth_token=TOKEN) as client:
        login = client.post("/login", data={"token": TOKEN}, follow_redirects=False)
        assert login.status_code == 303
        cookie = login.headers["set-cookie"]
        assert f"Max-Age={LOGIN_MAX_AGE}" in cookie
        value = client.cookies[COOKIE_NAME]
        # What itsdangerous signed, with the token as its key.
        signer = itsdangerous.URLSafeTimedSerializer(TOKEN, salt="drover dashboard login")
        assert signer.loads(value, max_age=60) == "dashboard"
        assert client.get("/api/sessions").status_code == 200

        later = int(time.time()) + LOGIN_MAX_AGE + 60
        monkeypatch.setattr(itsdangerous.TimestampSigner, "get_timestamp", lambda self: later)
        expired = client.get("/api/sessions")
        assert expired.status_code == 401
        assert "the login has expired: log in again" in expired.text

        monkeypatch.undo()
        # Signed with another token: the daemon was restarted with a new one.
        other = itsdangerous.URLSafeTimedSerializer("old-token", salt="drover dashboard login")
        client.cookies.clear()
        client.cookies.set(COOKIE_NAME, other.dumps("dashboard"))
        refused = client.get("/api/sessions")
        assert refused.status_code == 401
        assert "no longer valid" in refused.text
