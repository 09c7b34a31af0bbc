"""Every text marked for translation has a German translation (issue 19, item 6).

The messages are extracted the way ``pybabel extract -F babel.cfg`` does (docs/operations.md,
"Languages"): Babel's Python extractor over ``src/runbell/**.py`` and Jinja2's
(``jinja2.ext.babel_extract``, whitespace trimmed as the pages render it) over every
template. Each shipped catalogue must translate every one of them, not fuzzily, and hold
nothing that is no longer extracted. A text marked without a translation fails here, not
in front of a German reader.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib import resources
from io import BytesIO
from pathlib import Path

import pytest
from babel.messages.catalog import Catalog
from babel.messages.extract import DEFAULT_KEYWORDS, extract
from babel.messages.pofile import read_po, write_po
from jinja2.ext import babel_extract

from runbell import i18n

SRC = Path(i18n.__file__).parent
JINJA_OPTIONS = {"trimmed": "true", "extensions": "jinja2.ext.i18n"}

MsgId = str | tuple[str, str]


def extracted(root: Path = SRC) -> dict[MsgId, str]:
    """Every marked message under ``root`` → where it was first found."""
    found: dict[MsgId, str] = {}
    files: list[tuple[Path, object, dict[str, str] | None]] = [
        *((p, "python", None) for p in sorted(root.rglob("*.py"))),
        *((p, babel_extract, JINJA_OPTIONS) for p in sorted(root.rglob("*.j2"))),
    ]
    for path, method, options in files:
        with path.open("rb") as f:
            for lineno, message, _comments, _context in extract(
                method,  # type: ignore[arg-type]
                f,
                keywords=DEFAULT_KEYWORDS,
                options=options,
            ):
                key: MsgId = message if isinstance(message, str) else (message[0], message[1])
                found.setdefault(key, f"{path.relative_to(root)}:{lineno}")
    return found


def problems(catalog: Catalog, wanted: dict[MsgId, str]) -> list[str]:
    """What is wrong with one catalogue: missing, empty, fuzzy and obsolete messages."""
    out = []
    for msgid, where in wanted.items():
        entry = catalog.get(msgid if isinstance(msgid, str) else msgid[0])
        if entry is None:
            out.append(f"missing: {msgid!r} ({where})")
            continue
        strings = entry.string if isinstance(entry.string, tuple | list) else (entry.string,)
        if not all(s.strip() for s in strings):
            out.append(f"not translated: {msgid!r} ({where})")
        elif entry.fuzzy:
            out.append(f"fuzzy: {msgid!r} ({where})")
        if isinstance(msgid, tuple) and not isinstance(entry.id, tuple | list):
            out.append(f"needs plural forms: {msgid!r} ({where})")
    keys = {m if isinstance(m, str) else m[0] for m in wanted}
    for entry in catalog:
        if entry.id and (entry.id if isinstance(entry.id, str) else entry.id[0]) not in keys:
            out.append(f"obsolete: {entry.id!r}")
    out.extend(f"obsolete: {entry.id!r}" for entry in catalog.obsolete.values())
    return out


def shipped(locale: str) -> Catalog:
    source = resources.files("runbell").joinpath(i18n.catalogue_path(locale))
    with source.open("rb") as f:
        return read_po(f, locale=locale, domain=i18n.DOMAIN)


@pytest.fixture(scope="module")
def wanted() -> dict[MsgId, str]:
    return extracted()


@pytest.mark.parametrize("locale", [lang for lang in i18n.SUPPORTED if lang != i18n.DEFAULT])
def test_every_marked_text_is_translated(locale: str, wanted: dict[MsgId, str]) -> None:
    assert wanted, "nothing is marked for translation"
    assert problems(shipped(locale), wanted) == []


def test_the_catalogue_translates_at_runtime() -> None:
    with i18n.using("de"):
        assert i18n._("Go to your inbox") != "Go to your inbox"
    assert i18n._("Go to your inbox") == "Go to your inbox"


def _po(entries: Iterator[tuple[str, str]] | list[tuple[str, str]], fuzzy: str = "") -> Catalog:
    catalog = Catalog(locale="de", domain="runbell")
    for msgid, msgstr in entries:
        catalog.add(msgid, msgstr, flags=("fuzzy",) if msgid == fuzzy else ())
    buf = BytesIO()
    write_po(buf, catalog)
    buf.seek(0)
    return read_po(buf, locale="de")


def test_a_marked_text_without_translation_fails(tmp_path: Path) -> None:
    """The check above is not vacuous: a tiny source tree with three marked texts against
    a catalogue that lacks one, leaves one empty, has one fuzzy and one obsolete."""
    (tmp_path / "mod.py").write_text(
        "from runbell.i18n import _, ngettext\n"
        "A = _('Hello')\n"
        "B = _('New text nobody translated')\n"
        "C = ngettext('%(n)s run', '%(n)s runs', 2)\n"
    )
    (tmp_path / "page.html.j2").write_text(
        "<p>{% trans %}Welcome\n   back{% endtrans %}</p>{{ _('Fuzzy one') }}"
    )
    wanted = extracted(tmp_path)
    assert set(wanted) == {
        "Hello",
        "New text nobody translated",
        ("%(n)s run", "%(n)s runs"),
        "Welcome back",
        "Fuzzy one",
    }
    catalog = _po(
        [("Hello", "Hallo"), ("Welcome back", ""), ("Fuzzy one", "Unscharf"), ("Gone", "Weg")],
        fuzzy="Fuzzy one",
    )
    catalog.add(("%(n)s run", "%(n)s runs"), ("%(n)s Lauf", "%(n)s Läufe"))
    found = problems(catalog, wanted)
    assert found == [
        "missing: 'New text nobody translated' (mod.py:3)",
        "not translated: 'Welcome back' (page.html.j2:1)",
        "fuzzy: 'Fuzzy one' (page.html.j2:2)",
        "obsolete: 'Gone'",
    ]
    complete = _po([("Hello", "Hallo"), ("New text nobody translated", "Neu")])
    complete.add(("%(n)s run", "%(n)s runs"), ("%(n)s Lauf", "%(n)s Läufe"))
    complete.add("Welcome back", "Willkommen zurück")
    complete.add("Fuzzy one", "Scharf")
    assert problems(complete, wanted) == []


def test_the_domains_words_are_in_the_catalogue() -> None:
    """The domain is pure and marks nothing; the words it gives a person (badges, risk
    labels, push buttons) are marked where they are shown and must stay the same text."""
    from runbell.domain import actions, badges, people
    from runbell.domain import push_actions as pa
    from runbell.flows.neutral_words import BUTTONS
    from runbell.web.action_view import RISK_WORDS
    from runbell.web.wording import BADGE_WORDS, REFUSAL_WORDS, STATE_LABEL

    assert set(actions.RISK_CODES.values()) <= set(RISK_WORDS)
    assert set(badges.STATE_BADGES.values()) <= set(STATE_LABEL.values())
    assert {b["title"] for b in pa.offered(True, 600)} - {pa.snooze_title(600)} <= set(BUTTONS)
    refusals = {people.NOT_AN_APPROVER, people.NOT_THIS_REQUESTS_APPROVER, people.NOT_AN_AMENDER}
    assert refusals == set(REFUSAL_WORDS)
    catalog = shipped("de")
    for text in (*RISK_WORDS, *BADGE_WORDS, *BUTTONS, *REFUSAL_WORDS):
        entry = catalog.get(text)
        assert entry is not None and entry.string, text


def test_every_word_app_js_writes_is_in_the_catalogue() -> None:
    """app.js words what it writes with ``t("…")`` (one string literal each); each must
    be one of web.js_words.JS_WORDS, which the catalogue translates like any text."""
    import re

    from runbell.web.js_words import JS_WORDS

    script = (SRC / "web" / "static" / "app.js").read_text()
    used = set(re.findall(r'\bt\("((?:[^"\\]|\\.)*)"', script))
    assert used, "app.js words nothing through t()"
    assert used <= set(JS_WORDS), sorted(used - set(JS_WORDS))
    assert set(JS_WORDS) <= used, sorted(set(JS_WORDS) - used)
