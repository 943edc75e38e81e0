"""``safe_text``'s one-search check (issue 34: the daemon's store met the per-character
check with every finding message each tick) names exactly the characters the rule does."""

from __future__ import annotations

from rogue_watchdog import hosttext


def test_the_search_names_every_character_the_rule_names_and_no_other() -> None:
    search = hosttext._UNSAFE.search
    differ = [
        hex(code)
        for code in range(0x110000)
        if (search(chr(code)) is not None) != hosttext._unsafe(chr(code))
    ]
    assert differ == []


def test_text_with_non_ascii_and_no_unsafe_character_is_kept_as_it_is() -> None:
    text = "rogue job · train.py — started by cron → not in the allowlist…"
    assert hosttext.safe_text(text) is text
    assert hosttext.safe_text(text + "\n\u202e") == text + "\u23ce\\u202e"
