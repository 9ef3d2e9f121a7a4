"""The hot path: a session's messages added and read without Starlette's router and middlewares.

`POST` and `GET /v1/{namespace}/sessions/{session_id}/messages` are nearly every request an agent
makes. Starlette's request cycle around them (two exception middlewares, the router's scan of every
route, the endpoint wrapper) cost about a third of the server's CPU a turn. The lane runs the very
same handlers, error handlers and access middleware for those two routes and hands every other
request to the Starlette app unchanged, so answers, errors, metrics and access lines are the same.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

from starlette.applications import Starlette
from starlette.datastructures import State
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, Router
from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[Response]]
ErrorHandler = Callable[[Request, Exception], Awaitable[Response]]

MESSAGES = "/v1/{namespace}/sessions/{session_id}/messages"


def _messages_path(path: str) -> tuple[str, str] | None:
    """(namespace, session_id) when `path` matches the route's own pattern (no slash in either)."""
    parts = path.split("/")
    shape = len(parts) == 6 and parts[1] == "v1" and parts[3] == "sessions" and parts[5] == "messages"
    return (parts[2], parts[4]) if shape and parts[2] and parts[4] else None


class Lane:
    """ASGI app: the messages route's GET and POST straight to their handlers, the rest to `app`."""

    def __init__(
        self,
        app: Starlette,
        routes: list[BaseRoute],
        errors: Mapping[type[Exception], ErrorHandler],
        wrap: Callable[[ASGIApp], ASGIApp],
    ) -> None:
        self.app = app
        self.errors = errors
        self.handlers: dict[str, tuple[Route, Handler]] = {}
        for route in routes:
            if isinstance(route, Route) and route.path == MESSAGES:
                for method in route.methods or ():
                    if method in ("GET", "POST"):
                        self.handlers[method] = (route, route.endpoint)
        self.inner = wrap(self._handle)

    @property
    def state(self) -> State:
        return self.app.state

    @property
    def router(self) -> Router:
        return self.app.router

    @property
    def routes(self) -> list[BaseRoute]:
        return self.app.routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = _messages_path(scope["path"]) if scope["type"] == "http" and scope["method"] in self.handlers else None
        if found is not None:
            route, _handler = self.handlers[scope["method"]]
            scope["app"] = self.app
            scope["route"] = route
            scope["path_params"] = {"namespace": found[0], "session_id": found[1]}
            await self.inner(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        _route, handler = self.handlers[scope["method"]]
        try:
            response = await handler(request)
        except Exception as exc:
            response = await self._error(request, exc)
        await response(scope, receive, send)

    async def _error(self, request: Request, exc: Exception) -> Response:
        for cls in type(exc).__mro__:
            handler = self.errors.get(cls)
            if handler is not None:
                if cls is Exception:  # a bug: its traceback goes to the log, as Starlette's would
                    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
                return await handler(request, exc)
        raise exc
