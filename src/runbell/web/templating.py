"""Jinja2 for the pages: autoescaped, strict, compiled once; and the headers every page
carries (CSP without inline script or style, no framing, same-origin referrers, no store).
"""

from __future__ import annotations

from typing import Any

import jinja2
from fastapi.responses import HTMLResponse

from runbell import __version__, i18n
from runbell.web import flow_words, js_words, wording

PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    # Pages hold CSRF tokens and private data: never kept by a cache or the back button.
    "Cache-Control": "no-store",
}
# The API reference pages (/docs, /redoc) hold no private data, only the public OpenAPI
# document. Their bundles set styles at run time (ReDoc writes <style> elements) and
# ReDoc searches in a worker it makes from a blob: so those two are allowed here, and
# nothing else is loosened (still no inline or outside script, nothing from another site).
DOCS_HEADERS = {
    **PAGE_HEADERS,
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; "
        "worker-src 'self' blob:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "Cache-Control": "no-cache",
}

env = jinja2.Environment(
    loader=jinja2.PackageLoader("runbell.web", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    extensions=["jinja2.ext.i18n"],
)
# {% trans %} blocks collapse their whitespace, as the extractor reads them
# (tests/unit/test_catalogues.py extracts with trimmed=true too).
env.policies["ext.i18n.trimmed"] = True
# The callables read the language of the request being rendered (runbell.i18n's context
# variable: Accept-Language before sign-in, the person's preference after), so one
# compiled template serves every language. Newstyle: `_("%(n)s runs", n=3)` formats and
# escapes the way `{% trans %}` does.
env.install_gettext_callables(  # type: ignore[attr-defined]
    i18n.gettext, i18n.ngettext, newstyle=True
)
env.globals.update(
    asset_version=__version__,
    urgency_label=i18n.Labels(wording.URGENCY_LABEL),
    state_label=i18n.Labels(wording.STATE_LABEL),
    attention_label=i18n.Labels(wording.ATTENTION_LABEL),
    note_state_label=i18n.Labels(wording.NOTE_STATE_LABEL),
    delivery_label=i18n.Labels(wording.DELIVERY_STATUS_LABEL),
    channel_label=i18n.Labels(wording.CHANNEL_LABEL),
    decision_label=i18n.Labels(wording.POLICY_DECISION_LABEL),
    # A flow's English sentence in the reader's language (web.flow_words).
    flow_words=flow_words.worded,
)


def render(
    name: str,
    context: dict[str, Any],
    *,
    status: int = 200,
    headers: dict[str, str] | None = None,
) -> HTMLResponse:
    """A page with the security headers. ``context`` must give every template variable
    (undefined ones raise, so a typo fails a test instead of rendering blank)."""
    defaults: dict[str, Any] = {
        "signed_in": False,
        "csrf_token": "",
        "me_email": "",
        "nav_people": False,
        "page": "message",
        "body_data": {},
        # <html lang>: the language the page's texts are in (screen readers pick their
        # voice by it; axe's html-has-lang / valid-lang rules).
        "lang": i18n.current(),
        # What app.js writes into the page, in that language (web.js_words).
        "js_words": js_words.words(),
    }
    html = env.get_template(name).render({**defaults, **context})
    return HTMLResponse(html, status_code=status, headers={**PAGE_HEADERS, **(headers or {})})
