"""`helix-es serve`: the memory over HTTP, an ASGI app (Starlette) that uvicorn serves.

Routes (the OpenAPI document, `openapi.py`, describes each): a session's messages (add, get, clear),
search, recall, audit, forget; a person's erasure; the header form of messages, search and recall (session id in
`memory.session_id_header`, default X-Session-ID); a namespace's sessions; its facts (read, assert,
retract: `service.facts`); /healthz, /readyz,
/metrics, /openapi.json; the web console under /ui/. Every /v1 request passes `requests.call`
(key, namespace, session) before anything is read or written. Read-your-writes: each (namespace,
session) is one memory that waits for its own writes; a write answers with a consistency token
(`X-Helix-After`), and a read carrying one waits until the view has applied it, on any replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route, compile_path
from starlette.staticfiles import StaticFiles

from helix_es.client.runtime import Runtime
from helix_es.client.sessions import expect
from helix_es.config import Config
from helix_es.history.audit import audit
from helix_es.history.erasure import forget
from helix_es.history.subject_erasure import erase_subject
from helix_es.model import names
from helix_es.model.errors import InvalidInput
from helix_es.model.events import Position
from helix_es.service import facts as knowledge
from helix_es.service import recall as recalls
from helix_es.service import requests as rq
from helix_es.service.access import Access, AccessLog
from helix_es.service.ends import LogEnds
from helix_es.service.errors import HANDLERS, NO_STORE
from helix_es.service.histories import SessionHistories
from helix_es.service.keys import Keys
from helix_es.service.lane import Lane
from helix_es.service.messages import messages_body
from helix_es.service.metrics import CONTENT_TYPE, Metrics
from helix_es.service.openapi import document
from helix_es.service.pool import Memories
from helix_es.service.ready import LagFn, Readiness
from helix_es.service.sessions import MAX_PAGE, PAGE, SessionLists, list_namespaces

log = logging.getLogger(__name__)

CONSOLE = Path(__file__).resolve().parent / "console"
_text = json.encoder.encode_basestring  # json.dumps(ensure_ascii=False)'s own string encoder


@dataclass(frozen=True)
class Options:
    max_body: int = 1_048_576  # bytes of one request body
    session_idle: float = 600.0  # a session's memory is closed after this long unused
    lag_bound: int | None = None  # /readyz fails while a view lags more records than this
    access_log: bool = True  # a JSON line per request on stderr
    console: Path = CONSOLE


class Service:
    """What the handlers share: the config, the keys, the runtime, the memories, the metrics and readiness.

    The memories, audits and erasures run on `runtime`; one the service made itself it closes last."""

    def __init__(
        self, config: Config, keys: Keys, options: Options, lag: LagFn | None, runtime: Runtime | None = None
    ) -> None:
        self.config, self.keys, self.options = config, keys, options
        self.runtime = runtime or Runtime()
        self._owns_runtime = runtime is None
        self.session_header = config.memory.session_id_header or rq.DEFAULT_SESSION_HEADER
        self.memories = Memories(config, session_idle=options.session_idle, runtime=self.runtime)
        self.metrics = Metrics()
        self.readiness = Readiness(config, lag, options.lag_bound)
        self.access_log = AccessLog() if options.access_log else None
        self.session_lists = SessionLists()
        self.histories = SessionHistories()
        self.ends = LogEnds(config.log)

    def call(self, request: Request, *, header: bool = False, admin: bool = False) -> rq.Call:
        return rq.call(
            request,
            self.keys,
            self.config.log.topic_prefix,
            session_header=self.session_header if header else None,
            admin=admin,
        )

    def topic(self, namespace: str) -> str:
        return names.topic(namespace, self.config.log.topic_prefix)

    async def sweep_forever(self) -> None:
        pause = max(1.0, min(self.options.session_idle / 2, 30.0))
        while True:
            await asyncio.sleep(pause)
            await self.memories.sweep()

    async def flush_forever(self) -> None:
        while self.access_log is not None:
            await asyncio.sleep(0.25)
            self.access_log.flush()

    async def close(self) -> None:
        if self.access_log is not None:
            self.access_log.flush()
        await self.memories.close()
        await self.readiness.close()
        await self.ends.close()
        if self._owns_runtime:
            await self.runtime.aclose()


def _service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


def _session(call: rq.Call) -> str:
    assert call.session_id is not None  # the route names it, in the path or the header
    return call.session_id


def _written(service: Service, call: rq.Call, positions: list[Position], status: int) -> Response:
    # {"positions": [{"topic", "partition", "offset"}, ...]} put together directly: every add answers it
    each = (f'{{"topic":{_text(p.topic)},"partition":{p.partition},"offset":{p.offset}}}' for p in positions)
    body = f'{{"positions":[{",".join(each)}]}}'.encode()
    service.ends.saw(positions[-1])
    headers = {rq.AFTER: rq.token(_session(call), positions[-1])}
    return Response(body, status, headers=headers, media_type="application/json")


async def _after(service: Service, request: Request, call: rq.Call) -> Position | None:
    """The request's `X-Helix-After`, checked before the memory hears of it (a forged one would stall
    every later read of the session)."""
    after = rq.after(request, service.topic(call.namespace), _session(call))
    if after is not None:
        await service.ends.check(call.namespace, _session(call), after)
    return after


def _messages(call: rq.Call, messages: list[Any]) -> Response:
    return Response(messages_body(call.namespace, call.session_id, messages), media_type="application/json")


# -- /v1 -------------------------------------------------------------------------------------------


async def add(request: Request) -> Response:
    service = _service(request)
    call = service.call(request, header="session_id" not in request.path_params)
    messages = rq.messages_in(await rq.read_json(request, service.options.max_body))
    keys = rq.idempotency_keys(request, len(messages))
    async with service.memories.using(call.namespace, _session(call)) as memory:
        positions = [await memory.add(m, idempotency_key=k) for m, k in zip(messages, keys, strict=True)]
    service.metrics.adds += len(positions)
    return _written(service, call, positions, 201)


async def clear(request: Request) -> Response:
    service = _service(request)
    call = service.call(request, header="session_id" not in request.path_params)
    key = rq.idempotency_keys(request, 1)[0]
    async with service.memories.using(call.namespace, _session(call)) as memory:
        position = await memory.clear(idempotency_key=key)
    return _written(service, call, [position], 200)


async def get(request: Request) -> Response:
    service = _service(request)
    call = service.call(request, header="session_id" not in request.path_params)
    after = await _after(service, request, call)
    async with service.memories.using(call.namespace, _session(call)) as memory:
        if after is not None:
            expect(memory, after)
        messages = await memory.get()
    service.metrics.reads += 1
    return _messages(call, messages)


async def search(request: Request) -> Response:
    service = _service(request)
    call = service.call(request, header="session_id" not in request.path_params)
    query = request.query_params.get("q")
    if not query:
        raise InvalidInput("q", "give the text to look for: ?q=...")
    limit = rq.query_int(request, "limit", 10, 1, 1000)
    after = await _after(service, request, call)
    async with service.memories.using(call.namespace, _session(call)) as memory:
        if after is not None:
            expect(memory, after)
        messages = await memory.search(query, limit or 10)
    service.metrics.reads += 1
    return _messages(call, messages)


async def recall(request: Request) -> Response:
    """A question's best hits in the namespace, with score, session, position and time (`service.recall`)."""
    service = _service(request)
    call = service.call(request, header="session_id" not in request.path_params)
    query = request.query_params.get("q")
    if not query:
        raise InvalidInput("q", "give the question or words to find: ?q=...")
    limit = rq.query_int(request, "limit", None, 1, 1000)
    filters = recalls.options(request.query_params.multi_items())
    after = await _after(service, request, call)
    async with service.memories.using(call.namespace, _session(call)) as memory:
        if after is not None:
            expect(memory, after)
        found = await recalls.recall(memory, query, limit, filters)
    service.metrics.reads += 1
    return JSONResponse(recalls.hits_json(call.namespace, call.session_id, found))


# -- facts: a namespace's facts view, its corrections on the session `knowledge.FACTS_SESSION` --------


def _facts_call(service: Service, request: Request) -> rq.Call:
    return replace(service.call(request), session_id=knowledge.FACTS_SESSION)


async def facts(request: Request) -> Response:
    service = _service(request)
    call = _facts_call(service, request)
    after = await _after(service, request, call)
    async with service.memories.using(call.namespace, _session(call)) as memory:
        if after is not None:
            expect(memory, after)
        found = await knowledge.read(memory, request.query_params)
    service.metrics.reads += 1
    return JSONResponse(knowledge.facts_json(found))


async def assert_fact(request: Request) -> Response:
    service = _service(request)
    call = _facts_call(service, request)
    body = await rq.read_json(request, service.options.max_body)
    async with service.memories.using(call.namespace, _session(call)) as memory:
        position = await knowledge.assert_one(memory, body)
    return _written(service, call, [position], 201)


async def retract_fact(request: Request) -> Response:
    service = _service(request)
    call = _facts_call(service, request)
    reason = request.query_params.get("reason") or None
    async with service.memories.using(call.namespace, _session(call)) as memory:
        position = await knowledge.retract_one(memory, request.path_params["fact_id"], reason)
    return _written(service, call, [position], 200)


async def audit_session(request: Request) -> Response:
    service = _service(request)
    call = service.call(request)
    report = await audit(
        service.memories.config_for(call.namespace),
        session_id=_session(call),
        namespace=call.namespace,
        as_of=request.query_params.get("as_of") or None,
        offset=rq.query_int(request, "offset", None, 0),
        view=request.query_params.get("view") or None,
        reader=service.histories.read,
        runtime=service.runtime,
    )
    return JSONResponse(report.to_json())


async def forget_session(request: Request) -> Response:
    service = _service(request)
    call = service.call(request, admin=True)
    body = await rq.read_json(request, service.options.max_body, optional=True) or {}
    if not isinstance(body, dict) or set(body) - {"reason", "allow_unshreddable"}:
        raise InvalidInput("body", 'give nothing, or {"reason": "...", "allow_unshreddable": false}')
    allow = body.get("allow_unshreddable", False)
    if not isinstance(allow, bool):
        raise InvalidInput("allow_unshreddable", f"must be true or false, got {allow!r}")
    result = await forget(
        service.memories.config_for(call.namespace),
        session_id=_session(call),
        namespace=call.namespace,
        reason=body.get("reason"),
        allow_unshreddable=allow,
        runtime=service.runtime,
    )
    return JSONResponse(result.to_json())


async def erase(request: Request) -> Response:
    """Erase a person from the namespace (`helix_es.history.subject_erasure`): admin keys only; 201 with the
    receipt, 200 for a dry run."""
    service = _service(request)
    call = service.call(request, admin=True)
    subject, dry_run = rq.erasure(await rq.read_json(request, service.options.max_body))
    receipt = await erase_subject(
        service.memories.config_for(call.namespace),
        subject=subject,
        namespace=call.namespace,
        dry_run=dry_run,
        runtime=service.runtime,
    )
    return JSONResponse(receipt.to_json(), 200 if dry_run else 201)


async def sessions(request: Request) -> Response:
    service = _service(request)
    call = service.call(request)
    page = await service.session_lists.sessions(
        service.memories.config_for(call.namespace),
        call.namespace,
        limit=rq.query_int(request, "limit", PAGE, 1, MAX_PAGE) or PAGE,
        after=request.query_params.get("after") or None,
        query=request.query_params.get("q", ""),
    )
    return JSONResponse({"namespace": call.namespace, **page})


async def namespaces(request: Request) -> Response:
    service = _service(request)
    grant = rq.authorize(request, service.keys)
    found = [ns for ns in await list_namespaces(service.config) if grant.allows(ns)]
    return JSONResponse({"namespaces": found})


# -- operations ------------------------------------------------------------------------------------


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"}, headers=NO_STORE)


async def readyz(request: Request) -> Response:
    ready, report = await _service(request).readiness.check()
    return JSONResponse({"ready": ready, **report}, 200 if ready else 503, headers=NO_STORE)


async def metrics(request: Request) -> Response:
    service = _service(request)
    try:
        lag = await service.readiness.lag()
    except Exception as exc:  # the lag gauge is left out; the rest still answers
        log.warning("projector lag unavailable for /metrics: %s", exc)
        lag = None
    text = service.metrics.render(sessions=service.memories.open_sessions(), lag=lag)
    return Response(text, media_type=CONTENT_TYPE, headers=NO_STORE)


async def openapi(request: Request) -> Response:
    return JSONResponse(document(_service(request).session_header))


def _any_session_id(route: Route) -> Route:
    """`route` with a session id that may hold `/`: sent as %2F, but Starlette routes on the decoded
    path. The route's last segment still tells the routes apart; its `path` stays the template the
    access log and the metrics name."""
    route.path_regex, _format, route.param_convertors = compile_path(
        route.path.replace("{session_id}", "{session_id:path}")
    )
    return route


def routes(console: Path) -> list[BaseRoute]:
    session = "/v1/{namespace}/sessions/{session_id}"
    by_session = [
        Route(f"{session}/messages", add, methods=["POST"]),
        Route(f"{session}/messages", get, methods=["GET"]),
        Route(f"{session}/messages", clear, methods=["DELETE"]),
        Route(f"{session}/search", search, methods=["GET"]),
        Route(f"{session}/recall", recall, methods=["GET"]),
        Route(f"{session}/audit", audit_session, methods=["GET"]),
        Route(f"{session}/forget", forget_session, methods=["POST"]),
    ]
    return [
        *map(_any_session_id, by_session),
        Route("/v1/{namespace}/sessions", sessions, methods=["GET"]),
        Route("/v1/{namespace}/facts", facts, methods=["GET"]),
        Route("/v1/{namespace}/facts", assert_fact, methods=["POST"]),
        Route("/v1/{namespace}/facts/{fact_id}", retract_fact, methods=["DELETE"]),
        Route("/v1/{namespace}/erasures", erase, methods=["POST"]),
        Route("/v1/namespaces", namespaces, methods=["GET"]),
        Route("/v1/{namespace}/messages", add, methods=["POST"]),
        Route("/v1/{namespace}/messages", get, methods=["GET"]),
        Route("/v1/{namespace}/messages", clear, methods=["DELETE"]),
        Route("/v1/{namespace}/search", search, methods=["GET"]),
        Route("/v1/{namespace}/recall", recall, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Mount("/ui", StaticFiles(directory=console, html=True, check_dir=False), name="ui"),
    ]


def build_app(
    config: Config,
    keys: Keys,
    options: Options | None = None,
    *,
    lag: LagFn | None = None,
    runtime: Runtime | None = None,
) -> Lane:
    """The service's ASGI app; its lifespan closes every memory and store when the server stops (and the
    runtime, unless one is given: its giver closes that)."""
    options = options or Options()
    service = Service(config, keys, options, lag, runtime)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        tasks = [asyncio.create_task(service.sweep_forever()), asyncio.create_task(service.flush_forever())]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await service.close()

    served = routes(options.console)
    app = Starlette(
        routes=served,
        middleware=[Middleware(Access, metrics=service.metrics, log=service.access_log)],
        exception_handlers=HANDLERS,
        lifespan=lifespan,
    )
    app.state.service = service
    return Lane(app, served, HANDLERS, lambda inner: Access(inner, service.metrics, service.access_log))
