"""Prometheus metrics, by attention type and channel (served at ``/metrics``).

Counters and histograms count what *this process* did; the ``runbell_deliveries`` gauge
is read from the database at scrape time, so it is right however many workers run.

What the attention seed asks an operator to watch, and where each is counted (every one
after its transaction commits, so a rolled-back attempt counts nothing):

==============================  ===================================================
records created                 ``NOTIFICATIONS`` (``flows.attention``)
policy-suppressed               ``SUPPRESSED`` (``flows.attention``)
duplicates suppressed           ``DUPLICATES`` by kind (``flows.signals``, ``flows.attention``)
dispatch latency                ``FIRST_ATTEMPT_LATENCY`` (created → first send attempt);
                                ``DISPATCH_LATENCY`` (created → accepted) (``dispatch.record``)
provider acceptance             ``ATTEMPTS`` by outcome, ``ACCEPTED``, ``FAILURES``
delivery when known             ``DISPLAYED`` (``displayed`` receipts, ``flows.receipts``)
opens                           ``OPENS`` (``opened``/``clicked`` receipts)
acknowledgement time            ``ACK_SECONDS`` (``flows.inbox``)
stale opens                     ``STALE_OPENS`` by ``via`` (API read, web deep link, receipt)
expired input requests          ``EXPIRED_REQUESTS`` (``flows.input_requests``)
escalation / fallback use       ``ESCALATIONS`` (every fired step, on time or not);
                                ``FALLBACKS`` (a step fired at once because a channel
                                failed for good: ``flows.fallback``)
opt-outs after delivery         ``OPT_OUTS_AFTER_DELIVERY`` (``flows.preferences``)
failed authentication           ``AUTH_FAILURES`` by kind and answer (``flows.auth_failures``)
==============================  ===================================================
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


def bound(counter: Counter, *labels: str) -> Counter:
    """``counter.labels(*labels)``, looked up once per label set and kept: ``labels()``
    (its lock, its checks) cost more than the ``inc()`` on the signal path (issue 21).
    Prometheus keeps a child per label set for the life of the process anyway."""
    key = (id(counter), labels)
    child = _BOUND.get(key)
    if child is None:
        child = _BOUND[key] = counter.labels(*labels)
    return child


_BOUND: dict[tuple[int, tuple[str, ...]], Counter] = {}
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
    "Notifications opened after they closed or their action could no longer run",
    # via: "api" (GET /v1/notifications/{id}), "deep_link" (/n/{id} in a browser), or the
    # channel a device's opened/clicked receipt names (webpush, email, chat, inbox)
    ["attention_type", "via"],
    registry=REGISTRY,
)
OPT_OUTS = Counter(
    "runbell_opt_outs_total",
    "Consent withdrawn for a channel and urgency",
    ["channel", "urgency"],
    registry=REGISTRY,
)
FIRST_ATTEMPT_LATENCY = Histogram(
    "runbell_first_attempt_latency_seconds",
    "Notification (or webhook message) created → its first send attempt on a channel",
    ["attention_type", "channel"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600, 36000),
    registry=REGISTRY,
)
ATTEMPTS = Counter(
    "runbell_delivery_attempts_total",
    "Send attempts by what the provider answered: accepted, transient, unknown, permanent",
    ["attention_type", "channel", "outcome"],
    registry=REGISTRY,
)
DISPLAYED = Counter(
    "runbell_delivered_total",
    "Deliveries a device confirmed it showed (displayed receipts): delivery, when known",
    ["attention_type", "channel"],
    registry=REGISTRY,
)
OPENS = Counter(
    "runbell_opens_total",
    "Notifications opened or clicked (receipts), by the channel the receipt names",
    ["attention_type", "channel", "kind"],
    registry=REGISTRY,
)
EXPIRED_REQUESTS = Counter(
    "runbell_input_requests_expired_total",
    "Input requests that expired before anyone answered",
    ["kind"],
    registry=REGISTRY,
)
ESCALATIONS = Counter(
    "runbell_escalations_total",
    "Escalation steps taken: an unacknowledged notification sent on to a further channel",
    ["attention_type", "channel"],
    registry=REGISTRY,
)
FALLBACKS = Counter(
    "runbell_fallbacks_total",
    "Fallbacks on failure: a channel failed for good (or stayed unknown past the rule's "
    "bound) and the next consented channel was tried at once",
    ["attention_type", "from_channel", "to_channel", "trigger"],
    registry=REGISTRY,
)
OPT_OUTS_AFTER_DELIVERY = Counter(
    "runbell_opt_outs_after_delivery_total",
    "Consent withdrawn for a channel after a delivery on it (attention_type: the last one)",
    ["attention_type", "channel", "urgency"],
    registry=REGISTRY,
)
AUTH_FAILURES = Counter(
    "runbell_auth_failures_total",
    "Failed authentications: a bearer token, sign-in link or webhook signature that did not "
    "check out; answer=refused (401/404) or throttled (429, past the burst)",
    ["kind", "answer"],
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
