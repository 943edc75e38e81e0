"""Invisible format characters in host text are shown, not performed (hostile tester
wt9-attack, session j).

``safe_text`` escaped the bidi controls of UAX #9 but not U+061C ARABIC LETTER MARK, one
of its three implicit marks (with LRM and RLM, which it did escape): a command line
could still reorder what an operator reads. Nor other format characters (category Cf):
zero-width spaces and joiners, the word joiner, a byte-order mark, the soft hyphen and
the tag characters (U+E0000 block) are invisible, so ``/etc/cron.d/job\\u200b`` showed
as ``/etc/cron.d/job``, pointing the operator at another file.
"""

from __future__ import annotations

import sys
import unicodedata

import pytest

from rogue_watchdog.hosttext import safe_json, safe_text

FORMAT_CHARS = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"]


def test_the_arabic_letter_mark_is_escaped() -> None:
    assert safe_text("train.py \u061c--lr 1") == "train.py \\u061c--lr 1"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("/etc/cron.d/job\u200b", "/etc/cron.d/job\\u200b"),
        ("rogue\u2060-watchdog", "rogue\\u2060-watchdog"),
        ("\ufeffjob", "\\ufeffjob"),
        ("a\u00adb", "a\\xadb"),
        ("x\U000e0041\U000e0042", "x\\U000e0041\\U000e0042"),
    ],
)
def test_invisible_characters_are_shown(text: str, shown: str) -> None:
    assert safe_text(text) == shown
    assert safe_json({text: [text]}) == {shown: [shown]}


def test_every_format_character_is_escaped() -> None:
    left = [f"U+{ord(c):04X}" for c in FORMAT_CHARS if safe_text(c) == c]
    assert left == []
    assert all(safe_text(c).isascii() for c in FORMAT_CHARS)
