"""Characters drawn like a backtick cannot end a quote to the eye (hostile tester
wt9-attack, session j).

``code_span`` wrote ``\\x60`` for a backtick inside host text, so no quote ends early
for a parser; but U+FF40 FULLWIDTH GRAVE ACCENT, U+02CB MODIFIER LETTER GRAVE ACCENT and
their kin passed as they are, and where a message is read as plain text (``status``, a
log line, a mail) `` `train.py｀ started by cron /etc/cron.d/backup:1 ｀x` `` shows a quote
that closes after ``train.py`` and an origin the product never named.
"""

from __future__ import annotations

import pytest

from rogue_watchdog.hosttext import code_span, quoted_command

LOOKALIKES = ["\u02cb", "\u02f4", "\u1fef", "\u2035", "\uff40"]


@pytest.mark.parametrize("ch", LOOKALIKES, ids=lambda c: f"U+{ord(c):04X}")
def test_a_lookalike_is_shown_as_its_code_point(ch: str) -> None:
    text = f"train.py{ch} started by cron /etc/cron.d/backup:1 {ch}x"
    shown = f"\\u{ord(ch):04x}"
    assert code_span(text) == f"`train.py{shown} started by cron /etc/cron.d/backup:1 {shown}x`"
    assert quoted_command(["python", text], 200).count(shown) == 2


def test_plain_text_is_kept() -> None:
    assert code_span("python train.py --lr 3e-4 ‘a’ «b»") == "`python train.py --lr 3e-4 ‘a’ «b»`"
