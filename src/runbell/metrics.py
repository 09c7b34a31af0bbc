"""Prometheus metrics, by attention type and channel (served at ``/metrics``).

Counters and histograms count what *this process* did; the ``runbell_deliveries`` gauge
is read from the database at scrape time, so it is right however many workers run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

REGISTRY = CollectorRegistry(auto_describe=True)

NOTIFICATIONS = Counter(
    "runbell_notifications_created_total",
    "Notifications created",
    ["attention_type", "decision"],
    registry=REGISTRY,
)
SUPPRESSED = Counter(
    "runbell_policy_suppressed_total",
    "Transitions the policy kept from notifying anyone",
    ["attention_type", "decision"],
    registry=REGISTRY,
)
DUPLICATES = Counter(
    "runbell_duplicates_suppressed_total",
    "Repeated signals or notifications that created nothing new",
    ["kind"],
    registry=REGISTRY,
)
ACCEPTED = Counter(
    "runbell_deliveries_accepted_total",
    "Deliveries the provider or receiver accepted",
    ["attention_type", "channel"],
    registry=REGISTRY,
)
DISPATCH_LATENCY = Histogram(
    "runbell_dispatch_latency_seconds",
    "Notification created → delivery accepted",
    ["attention_type", "channel"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600, 36000),
    registry=REGISTRY,
)
FAILURES = Counter(
    "runbell_delivery_failures_total",
    "Failed delivery attempts by channel and reason",
    ["channel", "reason"],
    registry=REGISTRY,
)
DEAD_LETTERS = Counter(
    "runbell_dead_letters_total",
    "Deliveries that exhausted their retries",
    ["channel"],
    registry=REGISTRY,
)
DEFERRED_QUIET = Counter(
    "runbell_deferred_quiet_hours_total",
    "Sends deferred to the end of quiet hours",
    ["channel"],
    registry=REGISTRY,
)
ACK_SECONDS = Histogram(
    "runbell_acknowledgement_seconds",
    "Notification created → acknowledged",
    ["attention_type"],
    buckets=(5, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 86400, 7 * 86400),
    registry=REGISTRY,
)
STALE_OPENS = Counter(
    "runbell_stale_opens_total",
    "Notifications opened after their action could no longer run",
    ["attention_type"],
    registry=REGISTRY,
)
OPT_OUTS = Counter(
    "runbell_opt_outs_total",
    "Consent withdrawn for a channel and urgency",
    ["channel", "urgency"],
    registry=REGISTRY,
)
OPERATOR_ALERTS = Counter(
    "runbell_operator_alerts_total", "Problems an operator must fix", ["kind"], registry=REGISTRY
)


class DeliveryStatusCollector(Collector):
    """``runbell_deliveries{channel,status}`` from the database, at scrape time."""

    def __init__(self, counts: Callable[[], list[tuple[str, str, int]]]) -> None:
        self._counts = counts

    def collect(self) -> Iterator[Any]:
        family = GaugeMetricFamily(
            "runbell_deliveries",
            "Deliveries by channel and status (all tenants)",
            labels=["channel", "status"],
        )
        for channel, status, n in self._counts():
            family.add_metric([channel, status], n)
        yield family
