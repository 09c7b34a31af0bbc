"""The words app.js writes into a page (live notices, countdowns, the push set-up), for
the catalogue. A page in another language than English carries them translated in a
``<script type="application/json" id="rb-words">`` block (data, never run: the CSP still
allows no inline script); app.js's ``t("…")`` looks each up there and falls back to the
English. tests/unit/test_catalogues.py checks that every ``t("…")`` of app.js is listed.
"""

from __future__ import annotations

from runbell import i18n
from runbell.i18n import N_

JS_WORDS = (
    N_("Live updates stopped. Reload the page to see what is current."),
    N_("Nothing is waiting for your decision."),
    N_("No open updates."),
    N_("This request was answered, here or on another device."),
    N_("This request expired."),
    N_("A newer request replaced this one."),
    N_("The run stopped waiting for this request."),
    N_(
        "The run changed after this form was shown, so the form is closed: read the run "
        "again, then reload the page to answer."
    ),
    N_("The form is closed; what you entered is still in it, and nothing was sent."),
    N_("the run is now {state}"),
    N_("changed"),
    N_("Updated: {change} (version {version})."),
    N_("Updated: the runs below are as they are now."),
    N_("Use this device's timezone ({zone})"),
    N_("This browser cannot show push notifications."),
    N_("Asking your browser for permission…"),
    N_(
        "Browser notifications are blocked for this site. Allow them in your browser's "
        "site settings, then try again."
    ),
    N_("Setting up notifications for this device…"),
    N_("Browser notifications are on for this device."),
    N_("Browser notifications could not be turned on: {why}"),
    N_("in less than a minute"),
    N_("expired less than a minute ago"),
    N_("expired {ago}"),
)


def words() -> dict[str, str]:
    """The JS words in the current language; empty in English (app.js's own text)."""
    if i18n.current() == i18n.DEFAULT:
        return {}
    return {w: i18n._(w) for w in JS_WORDS}
