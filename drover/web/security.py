"""Who may talk to the dashboard: the Host check, the token gate and security headers.

Three ASGI middlewares, outermost first:

* :class:`SecurityHeaders` adds a Content-Security-Policy that allows only
  the dashboard's own scripts, styles and images, and ``nosniff``,
  ``no-referrer`` and ``DENY`` framing, to every response;
* :class:`HostCheck` (Starlette's ``TrustedHostMiddleware`` inside) answers
  400 to a request whose ``Host`` is not the bound address or on the
  allow-list: a DNS-rebinding page (``evil.example``
  resolving to 127.0.0.1) otherwise reads a tokenless loopback dashboard;
* :class:`TokenGate` (with ``--auth-token``) lets through a request with
  ``Authorization: Bearer T`` or the session cookie the login form sets
  (HttpOnly, SameSite=Strict), so the token is typed once and never copied
  into a link. The cookie is an ``itsdangerous`` signed, timestamped value
  (key: the token), valid for :data:`LOGIN_MAX_AGE`.

:func:`security_middleware` lists them in that order for the application.
"""

from __future__ import annotations

import hmac
import html
import ipaddress
from collections.abc import Iterable, Sequence
from http.cookies import SimpleCookie
from urllib.parse import parse_qs

from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "CONTENT_SECURITY_POLICY",
    "COOKIE_NAME",
    "LOGIN_MAX_AGE",
    "HostCheck",
    "SecurityHeaders",
    "TokenGate",
    "allowed_hosts_for",
    "host_of",
    "public_bind_warning",
    "security_middleware",
]

#: Only the dashboard's own files: no inline script or style, no other origin, no frames.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_HEADERS = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]
#: The cookie the login form sets.
COOKIE_NAME = "drover_session"
#: Seconds a login lasts (the cookie's Max-Age, and the age its signed timestamp may reach).
LOGIN_MAX_AGE = 12 * 3600
_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
_WILDCARDS = ("", "0.0.0.0", "::")
# A login form is a few dozen bytes; more is not one.
_MAX_FORM = 4096


class SecurityHeaders:
    """Adds the security headers to every HTTP response (unless the app set one itself)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(n, v) for n, v in _HEADERS if n not in present]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, with_headers)


def host_of(header: str) -> str:
    """The host part of a ``Host`` header, lower-cased, without port or IPv6 brackets."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    if header.count(":") == 1:
        return header.partition(":")[0]
    return header


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def allowed_hosts_for(bound: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """Host names a dashboard bound to ``bound`` answers to, besides ``extra``.

    The bound address itself; on loopback (or all addresses) also
    ``localhost``, ``127.0.0.1`` and ``::1``.
    """
    bound = host_of(bound) if not _is_ip(bound) else bound.lower()
    names = {host_of(h) for h in extra if h.strip()}
    if bound not in _WILDCARDS:
        names.add(bound)
    if bound in _WILDCARDS or _is_loopback(bound):
        names.update(_LOOPBACK_NAMES)
    return frozenset(names)


class HostCheck:
    """Refuses (400) a request whose ``Host`` names something this dashboard is not.

    Starlette's :class:`~starlette.middleware.trustedhost.TrustedHostMiddleware`
    decides, on :func:`allowed_hosts_for`'s names. Around it, two things it
    does not do: bound to every address (``0.0.0.0``), any IP address is
    accepted as the host too (DNS rebinding needs a name, and the machine's
    addresses are many); and a refusal says how to add a name
    (``--allowed-host``) instead of Starlette's bare "Invalid host header".
    """

    def __init__(self, app: ASGIApp, bound: str, allowed: Iterable[str] = ()) -> None:
        self.app = app
        self.allowed = allowed_hosts_for(bound, allowed)
        self.any_ip = bound in _WILDCARDS
        # Starlette compares the host as written, IPv6 literals in brackets.
        self._patterns = sorted(f"[{h}]" if ":" in h else h for h in self.allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = Headers(scope=scope).get("host")
        if self.any_ip and header and _is_ip(host_of(header)):
            await self.app(scope, receive, send)
            return
        reached = False

        async def trusted(scope: Scope, receive: Receive, send: Send) -> None:
            nonlocal reached
            reached = True
            await self.app(scope, receive, send)

        refused = False

        async def send_or_explain(message: Message) -> None:
            nonlocal refused
            if reached:
                await send(message)
            elif not refused:  # Starlette's refusal: ours says what to do
                refused = True
                await _host_refusal(header)(scope, receive, send)

        check = TrustedHostMiddleware(trusted, allowed_hosts=self._patterns, www_redirect=False)
        await check(scope, receive, send_or_explain)


def _host_refusal(header: str | None) -> Response:
    return PlainTextResponse(
        f"400 Bad Request: this dashboard does not answer to the host {header!r}; "
        "start it with --allowed-host NAME to add a name\n",
        status_code=400,
    )


def _safe_next(value: str | None) -> str:
    # Only a path on this dashboard: never another site (//evil, https://…).
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    return value


def _login_page(reason: str | None, next_path: str, status: int) -> HTMLResponse:
    message = f'<p class="error">{html.escape(reason)}</p>' if reason else ""
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        "<title>Log in · drover</title></head><body>"
        "<h1>401 Unauthorized</h1>"
        "<p>This drover dashboard needs its access token (<code>--auth-token</code>).</p>"
        f"{message}"
        '<form method="post" action="/login">'
        f'<input type="hidden" name="next" value="{html.escape(next_path, quote=True)}">'
        '<label>Token <input type="password" name="token" autocomplete="current-password" '
        "autofocus required></label> "
        '<button type="submit" id="login">Log in</button>'
        "</form>"
        "<p>Programs send <code>Authorization: Bearer …</code> instead.</p>"
        "</body></html>"
    )
    return HTMLResponse(
        body, status_code=status, headers={"WWW-Authenticate": 'Bearer realm="drover"'}
    )


class TokenGate:
    """Every request needs ``Authorization: Bearer T`` or the login cookie; else 401.

    ``GET /login`` shows the form, ``POST /login`` checks the token and sets
    the cookie (HttpOnly, SameSite=Strict, Secure over https) before going on
    to ``next``; ``/logout`` clears it. A browser asking for a page without
    either gets the form with the 401; anything else gets one line of text.
    """

    def __init__(self, app: ASGIApp, token: str, max_age: int = LOGIN_MAX_AGE) -> None:
        self.app = app
        self.token = token.encode()
        self.max_age = max_age
        # Signed with the token: a new token ends every login; the token itself is not stored.
        self._cookies = URLSafeTimedSerializer(token, salt="drover dashboard login")

    def _authorized(self, headers: Headers) -> tuple[bool, str]:
        scheme, _, given = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            if hmac.compare_digest(given.strip().encode(), self.token):
                return True, ""
            return False, "the token is wrong"
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # a malformed Cookie header is no login
            return False, "a token is required"
        morsel = cookie.get(COOKIE_NAME)
        if morsel is None:
            return False, "a token is required"
        try:
            self._cookies.loads(morsel.value, max_age=self.max_age)
        except SignatureExpired:
            return False, "the login has expired: log in again"
        except BadSignature:
            return False, "the login is no longer valid (the token changed): log in again"
        return True, ""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if path == "/login":
            await self._login(scope, receive, send)
            return
        if path == "/logout":
            response: Response = RedirectResponse("/login", status_code=303)
            response.delete_cookie(COOKIE_NAME, path="/", httponly=True, samesite="strict")
            await response(scope, receive, send)
            return
        headers = Headers(scope=scope)
        ok, reason = self._authorized(headers)
        if ok:
            await self.app(scope, receive, send)
            return
        if "text/html" in headers.get("accept", ""):
            query = scope.get("query_string", b"").decode("latin-1")
            response = _login_page(reason, path + (f"?{query}" if query else ""), 401)
        else:
            response = PlainTextResponse(
                f"401 Unauthorized: {reason} (send Authorization: Bearer T)\n",
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="drover"'},
            )
        await response(scope, receive, send)

    async def _login(self, scope: Scope, receive: Receive, send: Send) -> None:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        if scope["method"] != "POST":
            next_path = _safe_next((query.get("next") or ["/"])[0])
            await _login_page(None, next_path, 200)(scope, receive, send)
            return
        body = b""
        more = True
        while more and len(body) <= _MAX_FORM:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        form = parse_qs(body[:_MAX_FORM].decode("utf-8", "replace"))
        given = (form.get("token") or [""])[0]
        next_path = _safe_next((form.get("next") or ["/"])[0])
        if not hmac.compare_digest(given.encode(), self.token):
            await _login_page("The token is wrong.", next_path, 401)(scope, receive, send)
            return
        response = RedirectResponse(next_path, status_code=303)
        response.set_cookie(
            COOKIE_NAME,
            self._cookies.dumps("dashboard"),
            max_age=self.max_age,
            path="/",
            httponly=True,
            samesite="strict",
            secure=scope.get("scheme") == "https",
        )
        await response(scope, receive, send)


def security_middleware(
    *, host: str, allowed_hosts: Sequence[str] = (), auth_token: str | None = None
) -> list[Middleware]:
    """The middlewares, outermost first; the token gate only with an ``auth_token``."""
    # Outermost first: every answer gets the headers, even a refused Host or a 401.
    middleware = [
        Middleware(SecurityHeaders),
        Middleware(HostCheck, bound=host, allowed=tuple(allowed_hosts)),
    ]
    if auth_token:
        middleware.append(Middleware(TokenGate, token=auth_token))
    return middleware


def public_bind_warning(host: str, auth_token: str | None) -> str | None:
    """The warning to print when the dashboard listens beyond this machine without a token."""
    if auth_token or _is_loopback(host):
        return None
    return (
        f"warning: the dashboard listens on {host} without --auth-token: anyone who can "
        "reach this port can read every session, its spec and its history"
    )
