"""Who may act on the dashboard, and the CSRF check every POST passes.

Viewing needs nothing; acting needs a principal. Either the operator signs in
once with the configured token (kept as a signed, HttpOnly session cookie), or
the host application passes an auth hook that names the principal of a request
from its own session. Every POST, sign-in included, carries the session's CSRF
token (a form field or the ``X-CSRF-Token`` header htmx sends) and is refused
without it. See docs/operations/dashboard.md.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.requests import Request

AuthHook = Callable[[Request], "Awaitable[str | None] | str | None"]
"""Returns the principal (a user name) allowed to act for this request, or None."""

CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
_SESSION_CSRF = "csrf"
_SESSION_WHO = "who"
MIN_TOKEN = 8


@dataclass(frozen=True, slots=True, repr=False)
class TokenAuth:
    """Actions for whoever signs in with ``token``. The session cookie is signed
    with a key derived from the token (so replicas sharing a token share
    sessions, and a new token ends every session) unless ``secret`` is given."""

    token: str
    secret: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.token, str) or len(self.token.strip()) < MIN_TOKEN:
            raise ValueError(f"the dashboard token must be at least {MIN_TOKEN} characters")

    def __repr__(self) -> str:  # never print the token
        return "TokenAuth(token=***)"

    def matches(self, offered: str) -> bool:
        return hmac.compare_digest(offered.encode(), self.token.encode())

    def session_key(self) -> str:
        if self.secret:
            return self.secret
        return hmac.new(self.token.encode(), b"venturi-web-session-v1", hashlib.sha256).hexdigest()


class Access:
    """Resolves the principal of a request under the configured scheme."""

    def __init__(self, auth: TokenAuth | AuthHook | None, *, read_only: bool) -> None:
        self.token = auth if isinstance(auth, TokenAuth) else None
        self.hook = None if auth is None or isinstance(auth, TokenAuth) else auth
        self.read_only = read_only

    @property
    def actions(self) -> bool:
        """Whether any action route exists: not read-only, and someone can authenticate."""
        return not self.read_only and (self.token is not None or self.hook is not None)

    @property
    def uses_login(self) -> bool:
        return self.actions and self.token is not None

    def session_key(self) -> str:
        return self.token.session_key() if self.token is not None else secrets.token_hex(32)

    async def principal(self, request: Request) -> str | None:
        if not self.actions:
            return None
        if self.hook is not None:
            found = self.hook(request)
            if inspect.isawaitable(found):
                found = await found
            return found if isinstance(found, str) and found else None
        who = request.session.get(_SESSION_WHO)
        return who if isinstance(who, str) and who else None

    def sign_in(self, request: Request, offered: str, name: str) -> str | None:
        """Start an authenticated session when ``offered`` is the token."""
        if self.token is None or not self.token.matches(offered):
            return None
        clean = "".join(ch for ch in name.strip() if ch.isprintable())[:64]
        who = f"token:{clean}" if clean else "token"
        request.session.clear()  # a fresh session: no fixation of an earlier one
        request.session[_SESSION_WHO] = who
        request.session[_SESSION_CSRF] = secrets.token_urlsafe(32)
        return who

    @staticmethod
    def sign_out(request: Request) -> None:
        request.session.clear()


def csrf_token(request: Request) -> str:
    """This session's CSRF token, created on first use."""
    token = request.session.get(_SESSION_CSRF)
    if not isinstance(token, str) or not token:
        token = secrets.token_urlsafe(32)
        request.session[_SESSION_CSRF] = token
    return token


def csrf_ok(request: Request, form_value: object) -> bool:
    """The POST carries this session's token (a session that has none yet fails)."""
    expected = request.session.get(_SESSION_CSRF)
    offered = request.headers.get(CSRF_HEADER) or (
        form_value if isinstance(form_value, str) else "")
    if not isinstance(expected, str) or not expected or not offered:
        return False
    return hmac.compare_digest(offered.encode(), expected.encode())
