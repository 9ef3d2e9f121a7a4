"""Prometheus metrics in the text exposition format (version 0.0.4), written by hand.

Requests by route template (never the raw path: one series per route, whatever the namespaces),
method and status; a latency histogram by route and method; messages added and reads served;
open session memories; and each view's projector lag (records of the log it has not applied yet),
read when scraped.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{_label(v)}"' for k, v in pairs) + "}"


class Metrics:
    def __init__(self) -> None:
        self.requests: dict[tuple[str, str, str], int] = {}  # (route, method, status) -> count
        self._latency: dict[tuple[str, str], list[int]] = {}  # (route, method) -> count per bucket (+Inf last)
        self._latency_sum: dict[tuple[str, str], float] = {}
        self.adds = 0
        self.reads = 0

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        key = (route, method, str(status))
        self.requests[key] = self.requests.get(key, 0) + 1
        where = (route, method)
        counts = self._latency.setdefault(where, [0] * (len(BUCKETS) + 1))
        counts[bisect.bisect_left(BUCKETS, seconds)] += 1
        self._latency_sum[where] = self._latency_sum.get(where, 0.0) + seconds

    def render(self, *, sessions: int, lag: Mapping[str, int] | None) -> str:
        out = [
            "# HELP helix_http_requests_total HTTP requests by route template, method and status.",
            "# TYPE helix_http_requests_total counter",
        ]
        for (route, method, status), n in sorted(self.requests.items()):
            out.append(
                f"helix_http_requests_total{_labels([('route', route), ('method', method), ('status', status)])} {n}"
            )
        out += [
            "# HELP helix_http_request_duration_seconds Time from request to the end of the response.",
            "# TYPE helix_http_request_duration_seconds histogram",
        ]
        for (route, method), counts in sorted(self._latency.items()):
            base = [("route", route), ("method", method)]
            running = 0
            for bound, n in zip((*map(str, BUCKETS), "+Inf"), counts, strict=True):
                running += n
                out.append(f"helix_http_request_duration_seconds_bucket{_labels([*base, ('le', bound)])} {running}")
            out.append(f"helix_http_request_duration_seconds_sum{_labels(base)} {self._latency_sum[(route, method)]}")
            out.append(f"helix_http_request_duration_seconds_count{_labels(base)} {running}")
        out += [
            "# HELP helix_memory_adds_total Messages appended to the log.",
            "# TYPE helix_memory_adds_total counter",
            f"helix_memory_adds_total {self.adds}",
            "# HELP helix_memory_reads_total Reads of a view (get and search).",
            "# TYPE helix_memory_reads_total counter",
            f"helix_memory_reads_total {self.reads}",
            "# HELP helix_memory_sessions_open Session memories open in this server.",
            "# TYPE helix_memory_sessions_open gauge",
            f"helix_memory_sessions_open {sessions}",
        ]
        if lag is not None:
            out += [
                "# HELP helix_projector_lag Records of the log a view has not applied yet.",
                "# TYPE helix_projector_lag gauge",
            ]
            out += [f"helix_projector_lag{_labels([('view', view)])} {n}" for view, n in sorted(lag.items())]
        return "\n".join(out) + "\n"
