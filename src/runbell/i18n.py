"""Languages: the message catalogues, which one a person reads, and dates in their words.

Every text a person reads (pages, push titles and bodies, email, chat, digests, the
reasons an action was refused) is marked for translation and looked up here. The
English text is the message id (``msgid``), so English needs no catalogue; every other
language has ``locale/<lang>/LC_MESSAGES/runbell.po``, read as it is at first use (no
compile step: :func:`babel.messages.pofile.read_po`, then an in-memory ``.mo``).

Which language: the *current* one, a context variable. The web app sets it per request
from ``Accept-Language`` (:func:`negotiate`) and then from the signed-in person's
preference; a delivery sets it to its recipient's (:func:`using`). Code that marks a
text calls :func:`_` / :func:`ngettext` at the moment it words it; :func:`N_` marks a text
kept in a table and translated where it is shown.

Example::

    with using("de"):
        assert _("Inbox") == "Posteingang"
    assert negotiate("de-CH,de;q=0.9,en;q=0.5") == "de"
"""

from __future__ import annotations

import gettext as _gettext
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, tzinfo
from functools import cache
from importlib import resources
from io import BytesIO

from babel import Locale, UnknownLocaleError
from babel import dates as babel_dates
from babel import numbers as babel_numbers
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po

DOMAIN = "runbell"
DEFAULT = "en"
#: The languages shipped complete (tests/unit/test_catalogues.py checks every catalogue).
SUPPORTED = ("en", "de")
#: The name of each language in itself, for the settings page's choice.
NATIVE_NAME = {"en": "English", "de": "Deutsch"}

_current: ContextVar[str] = ContextVar("runbell_locale", default=DEFAULT)


def normalize(locale: str | None) -> str:
    """A stored or asked-for locale (``de``, ``de_AT``, ``de-CH``) → one of
    :data:`SUPPORTED`, English when we do not have it."""
    if not locale:
        return DEFAULT
    lang = locale.replace("-", "_").split("_", 1)[0].strip().lower()
    return lang if lang in SUPPORTED else DEFAULT


def negotiate(accept_language: str | None) -> str:
    """The best of :data:`SUPPORTED` for an ``Accept-Language`` header (RFC 9110 §12.5.4:
    quality values, ``*``, ranges by prefix); English when nothing matches."""
    if not accept_language:
        return DEFAULT
    ranked: list[tuple[float, int, str]] = []
    for i, part in enumerate(accept_language.split(",")[:32]):
        tag, _sep, params = part.strip().partition(";")
        q = 1.0
        for param in params.split(";"):
            key, _eq, value = param.strip().partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        tag = tag.strip().lower()
        if tag and q > 0:
            ranked.append((-q, i, tag))
    for _q, _i, tag in sorted(ranked):
        if tag == "*":
            return DEFAULT
        lang = tag.split("-", 1)[0]
        if lang in SUPPORTED:
            return lang
    return DEFAULT


def catalogue_path(locale: str) -> str:
    return f"locale/{locale}/LC_MESSAGES/{DOMAIN}.po"


@cache
def translator(locale: str) -> _gettext.NullTranslations:
    """The gettext translations of ``locale`` (one of :data:`SUPPORTED`), read once.
    Fuzzy entries are left out: a text nobody checked is shown in English."""
    locale = normalize(locale)
    if locale == DEFAULT:
        return _gettext.NullTranslations()
    source = resources.files("runbell").joinpath(catalogue_path(locale))
    with source.open("rb") as f:
        catalog = read_po(f, locale=locale, domain=DOMAIN)
    buf = BytesIO()
    write_mo(buf, catalog, use_fuzzy=False)
    buf.seek(0)
    return _gettext.GNUTranslations(buf)


def current() -> str:
    """The language texts are worded in right now."""
    return _current.get()


def activate(locale: str | None) -> str:
    """Word texts in ``locale`` from here on (in this context: a request, a task)."""
    lang = normalize(locale)
    _current.set(lang)
    return lang


@contextmanager
def using(locale: str | None) -> Iterator[str]:
    """Word texts in ``locale`` inside the ``with`` block, then as before."""
    token = _current.set(normalize(locale))
    try:
        yield _current.get()
    finally:
        _current.reset(token)


def _(message: str) -> str:
    """``message`` (English) in the current language."""
    return translator(_current.get()).gettext(message)


gettext = _


def ngettext(singular: str, plural: str, n: int) -> str:
    """The form of ``singular``/``plural`` for ``n`` in the current language."""
    return translator(_current.get()).ngettext(singular, plural, n)


def N_(message: str) -> str:
    """Marks a text for the catalogue without translating it (a table of labels): it is
    translated where it is shown, with :func:`_` or :class:`Labels`."""
    return message


class Labels(Mapping[str, str]):
    """A table of texts marked with :func:`N_`, read in the current language."""

    def __init__(self, table: Mapping[str, str]) -> None:
        self._table = table

    def __getitem__(self, key: str) -> str:
        return _(self._table[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)


def _babel_locale(locale: str) -> Locale:
    try:
        return Locale.parse(normalize(locale))
    except (UnknownLocaleError, ValueError):
        return Locale.parse(DEFAULT)


def format_time(
    value: datetime | None,
    locale: str | None = None,
    tz: tzinfo | None = None,
    *,
    seconds: bool = False,
) -> str:
    """An absolute time in the person's timezone and language: ``29 Nov 2026, 14:05 CET``
    in English, ``29. Nov. 2026, 14:05 MEZ`` in German (``14:05:09`` with ``seconds``)."""
    if value is None:
        return ""
    lang = normalize(locale if locale is not None else current())
    local = value.astimezone(tz) if tz is not None else value
    if lang == DEFAULT:
        clock = f"{local:%H:%M:%S}" if seconds else f"{local:%H:%M}"
        return f"{local.day} {local:%b %Y}, {clock} {local.tzname() or ''}".rstrip()
    pattern = "d. MMM y, HH:mm:ss zzz" if seconds else "d. MMM y, HH:mm zzz"
    zone = tz if tz is not None else value.tzinfo
    return str(babel_dates.format_datetime(value, pattern, tzinfo=zone, locale=_babel_locale(lang)))


def format_date(value: datetime, locale: str | None = None, tz: tzinfo | None = None) -> str:
    """A day in the person's words: ``29 Nov 2026`` / ``29.11.2026``."""
    lang = normalize(locale if locale is not None else current())
    local = value.astimezone(tz) if tz is not None else value
    if lang == DEFAULT:
        return f"{local.day} {local:%b %Y}"
    return str(babel_dates.format_date(local, "medium", locale=_babel_locale(lang)))


def format_number(value: float | int, locale: str | None = None) -> str:
    """A number with the language's separators: ``1,234.5`` / ``1.234,5``."""
    lang = normalize(locale if locale is not None else current())
    return str(babel_numbers.format_decimal(value, locale=_babel_locale(lang)))
