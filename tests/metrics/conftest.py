"""An in-memory metric reader behind the global meter provider (the instruments in
`tether_common.metrics` are proxies of it), the two ways tests read it, and a database
of each module's own.

Tests compare cumulative values before and after an act, or label what they record with
names of their own (a fresh script, tool or run), so the order tests run in never matters.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)

from dbkit import new_database

Point = NumberDataPoint | HistogramDataPoint


@pytest.fixture(scope="session")
def reader() -> InMemoryMetricReader:
    """The global meter provider, installed once per process with an in-memory reader."""
    if isinstance(metrics.get_meter_provider(), MeterProvider):
        pytest.fail("a meter provider was installed before tests/metrics could install its own")
    found = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[found]))
    return found


def _point(reader: InMemoryMetricReader, name: str, attrs: dict[str, object]) -> Point | None:
    data = reader.get_metrics_data()
    wanted = dict(attrs)
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != name:
                    continue
                for point in metric.data.data_points:
                    if dict(point.attributes or {}) == wanted and isinstance(
                        point, NumberDataPoint | HistogramDataPoint
                    ):
                        return point
    return None


@pytest.fixture
def metric_sum(reader: InMemoryMetricReader) -> Callable[..., float]:
    """`metric_sum(name, **attributes)`: a counter's (or up-down counter's) total so far."""

    def read(name: str, **attrs: object) -> float:
        point = _point(reader, name, attrs)
        return float(point.value) if isinstance(point, NumberDataPoint) else 0.0

    return read


@pytest.fixture
def metric_histogram(reader: InMemoryMetricReader) -> Callable[..., tuple[int, float]]:
    """`metric_histogram(name, **attributes)`: a histogram's (count, sum) so far."""

    def read(name: str, **attrs: object) -> tuple[int, float]:
        point = _point(reader, name, attrs)
        return (point.count, point.sum) if isinstance(point, HistogramDataPoint) else (0, 0.0)

    return read


@pytest.fixture(scope="module")
async def own_database_url(database_url: str) -> str:
    """A fresh database on the session's server: counts (pending approvals) are then this
    module's own, whatever other tests' services do meanwhile."""
    return await new_database(database_url, "metrics")
