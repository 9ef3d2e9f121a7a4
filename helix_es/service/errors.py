"""Errors as JSON responses: `{"error": "...", "field": "..."}`, one status per kind of failure.

- 400: a body that is not JSON or nested too deep (field `body`), a consistency token no write of
  the session gave (`X-Helix-After`); 401: no or unknown key; 403: the key may not use the
  namespace (or forget, without admin); 404, 405: no such route or method;
- 409: `forget` cannot shred the session; 413: the body is over `--max-body`;
- 422: bad input (`InvalidInput`: the field it names); 503: the log or a store failed;
- 504: a read waited `read_timeout` for its view to apply a write and it did not.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from helix_es.history.erasure import NotShreddable
from helix_es.model.errors import ConsistencyTimeout, HelixError, InvalidInput

log = logging.getLogger(__name__)

NO_STORE = {"Cache-Control": "no-store"}


class ApiError(Exception):
    """An error response: `status`, what went wrong and what to do, the field at fault."""

    def __init__(
        self, status: int, error: str, field: str | None = None, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(error)
        self.status, self.error, self.field, self.headers = status, error, field, dict(headers or {})


def error_response(
    status: int, error: str, field: str | None = None, headers: Mapping[str, str] | None = None
) -> Response:
    body: dict[str, Any] = {"error": error}
    if field is not None:
        body["field"] = field
    return JSONResponse(body, status, headers={**NO_STORE, **(headers or {})})


async def _api(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.error, exc.field, exc.headers)


async def _invalid(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, InvalidInput)
    return error_response(422, exc.problem, exc.field)


async def _timeout(request: Request, exc: Exception) -> Response:
    return error_response(504, str(exc))


async def _not_shreddable(request: Request, exc: Exception) -> Response:
    return error_response(409, str(exc))


async def _unavailable(request: Request, exc: Exception) -> Response:
    log.warning("%s %s: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
    return error_response(503, f"the log or a store failed: {exc}; retry later", headers={"Retry-After": "1"})


async def _http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    what = {404: "no such route: see /openapi.json", 405: f"{request.method} is not allowed here"}
    return error_response(exc.status_code, what.get(exc.status_code, exc.detail), headers=exc.headers)


async def _crash(request: Request, exc: Exception) -> Response:
    return error_response(500, "internal error: the server log has the details")


# Looked up along each exception's MRO: the most specific class wins.
HANDLERS = {
    ApiError: _api,
    HTTPException: _http,
    InvalidInput: _invalid,
    ConsistencyTimeout: _timeout,
    NotShreddable: _not_shreddable,
    HelixError: _unavailable,
    OSError: _unavailable,
    Exception: _crash,
}
