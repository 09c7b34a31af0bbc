"""Public free text (a signal's reason, a report's summary): one short, safe line."""

from __future__ import annotations

import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from runbell.domain.text import REASON_MAX, public_text


def test_control_characters_become_spaces_and_bidi_controls_go() -> None:
    assert public_text("quota\r\nexceeded\t(\x1b[31mred\x1b[0m)\x00", 200) == (
        "quota exceeded ( [31mred [0m)"
    )
    # U+202E would make a chat line read backwards: dropped, the text kept.
    assert public_text("invoice \u202egpj.exe", 200) == "invoice gpj.exe"
    assert public_text("one\u2028two\u2029three", 200) == "one two three"


def test_long_text_is_cut_to_the_limit_with_an_ellipsis() -> None:
    cut = public_text("x" * 500, REASON_MAX)
    assert cut is not None
    assert len(cut) == REASON_MAX == 200
    assert cut.endswith("…")
    assert public_text("y" * 200, REASON_MAX) == "y" * 200  # exactly the limit: kept whole


def test_blank_text_is_no_text() -> None:
    assert public_text(None, 200) is None
    assert public_text(" \n\t\x00 ", 200) is None


def test_emoji_and_other_scripts_are_kept() -> None:
    text = "déploiement réussi 👩‍👩‍👧 完成"  # the family emoji joins with U+200D (kept)
    assert public_text(text, 200) == text


@given(st.text(max_size=600), st.integers(min_value=2, max_value=300))
def test_any_text_comes_out_short_one_line_and_stable(text: str, limit: int) -> None:
    out = public_text(text, limit)
    if out is None:
        return
    assert 0 < len(out) <= limit
    assert out == out.strip()
    assert not any(unicodedata.category(ch) in ("Cc", "Zl", "Zp") for ch in out)
    assert "\u202e" not in out and "  " not in out
    assert public_text(out, limit) == out  # cleaning twice changes nothing
