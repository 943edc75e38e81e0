"""Host text made safe at the boundary: one rule for every alert sink and the state store.

Command lines, environments, unit and program names come from the host and are hostile.
Read with ``surrogateescape``, a byte that is not UTF-8 becomes a lone surrogate
(``\\udcff``), which no UTF-8 encoder accepts: one such byte in a finding would make an
alert unsendable. Control characters forge lines (``\\n[RESOLVED] … all clear``), move
the cursor or ring the bell (ESC, BEL, CR) and reorder text (bidi overrides).

:func:`safe_text` turns all of these into visible, inert text; :func:`safe_json` applies
it to every string (keys included) of a JSON-ready value. The result is always valid
UTF-8 and holds no control character.

A message quotes host text in code spans only (:func:`code_span`, or
:func:`plain_or_code` for a path or name that is one plain word): code that cuts or
rewrites a message at the product's own words looks outside them
(:func:`find_outside_code` and its siblings), so no command line, session name or socket
path can cut a clause off or forge one.

Sources: PEP 383 (``surrogateescape``: bytes 0x80–0xFF as U+DC80–U+DCFF); Unicode
categories Cc/Cs/Zl/Zp/Cf (Cf holds the bidi controls of UAX #9).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from typing import Any

NEWLINE = "\u23ce"  # ⏎: a line break shown, never performed
_NAMED = {"\r": "\\r", "\t": "\\t"}
# Format characters (Unicode category Cf; 14.0, the unicodedata of Python 3.11): the bidi
# marks, embeddings, overrides and isolates of UAX #9 (U+061C ALM with LRM and RLM among
# them) reorder what a reader sees; zero-width spaces and joiners, the word joiner, the
# byte-order mark, the soft hyphen and the tag characters are invisible, so
# ``/etc/cron.d/job\u200b`` would show as another file's name. Ranges, not a scan of
# every code point at import; tests/unit/test_hosttext_search.py checks them against
# unicodedata.
_FORMAT = (
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f"
    "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001"
    "\U000e0020-\U000e007f"
)


# Every character _unsafe() names, as one class: a search in C, not a call per character
# (a finding's message has non-ASCII text, so the daemon's store met the slow path with
# every finding it touched each tick, about 0.3 ms per tick; issue 34).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029" + _FORMAT + "]")


def _unsafe(ch: str) -> bool:
    code = ord(ch)
    return (
        code < 0x20
        or 0x7F <= code <= 0x9F
        or 0xD800 <= code <= 0xDFFF
        or ch in "\u2028\u2029"
        or unicodedata.category(ch) == "Cf"
    )


def safe_text(text: str) -> str:
    """``text`` as inert, valid UTF-8 text.

    - a byte that was not UTF-8 (a lone surrogate U+DC80–U+DCFF) becomes ``\\xNN``,
      any other lone surrogate ``\\uXXXX``;
    - a newline becomes ``⏎``; CR and TAB become ``\\r`` and ``\\t``;
    - every other control character (C0, DEL, C1), the line and paragraph separators
      and the format characters (category Cf: the bidi controls, zero-width and tag
      characters) become ``\\xNN`` / ``\\uXXXX`` / ``\\UXXXXXXXX``.

    Args:
        text: Any string, e.g. a command line decoded with ``surrogateescape``.

    Returns:
        The same string when nothing needed escaping (the common case, no copy).
    """
    if text.isascii() and text.isprintable():
        return text
    if _UNSAFE.search(text) is None:
        return text
    out = []
    for ch in text:
        if not _unsafe(ch):
            out.append(ch)
            continue
        code = ord(ch)
        if ch == "\n":
            out.append(NEWLINE)
        elif ch in _NAMED:
            out.append(_NAMED[ch])
        elif 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif code < 0x100:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:  # \U and eight digits: \ue0041 would read as U+E004 and a "1"
            out.append(f"\\U{code:08x}")
    return "".join(out)


def safe_json(value: Any) -> Any:
    """A copy of a JSON-ready value with :func:`safe_text` applied to every string
    (dictionary keys too); numbers, booleans and None are kept.

    Args:
        value: dicts, lists/tuples, strings, numbers, None (what ``json.loads`` gives).

    Returns:
        A value ``json.dumps(..., ensure_ascii=False).encode("utf-8")`` always accepts.
    """
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return {safe_text(str(k)): safe_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [safe_json(v) for v in value]
    return value


_SPACE = re.compile(r"\s")


def command_text(argv: Sequence[str], width: int) -> str:
    """A command line in at most ``width`` characters, keeping what tells jobs apart.

    Paths are shortened from the left: the interpreter becomes its base name
    (``/root/.pyenv/versions/3.11.7/bin/python`` → ``python``), then each argument that
    is one path (no white space) keeps its last component (``…/train.py``). Only then is
    the end clipped with ``…``.
    A cut from the right lost the script and its arguments behind a long interpreter
    path. Escapes nothing: each output escapes host text its own way.

    Args:
        argv: The command line.
        width: Most characters returned (at least 1).

    Returns:
        The joined command line, shortened as above when longer than ``width``.
    """
    args = list(argv)
    text = " ".join(args)
    if len(text) <= width:
        return text
    if args and "/" in args[0].rstrip("/"):
        args[0] = args[0].rstrip("/").rsplit("/", 1)[1]
    for i in range(1, len(args)):
        text = " ".join(args)
        if len(text) <= width:
            return text
        head, sep, base = args[i].rstrip("/").rpartition("/")
        # One path only: a shell script (`sh -c "curl … | sh; exec python3 /x/train.py"`)
        # cut to its last component would show `…/train.py` and hide what it runs.
        if sep and head and base and "=" not in head and not _SPACE.search(args[i]):
            args[i] = "…/" + base
    return clip(" ".join(args), width)


#: What :func:`code_span` escapes: the backtick, and the characters drawn like one (U+02CB,
#: U+02F4 modifier grave accents, U+1FEF Greek varia, U+2035 reversed prime, U+FF40
#: fullwidth grave accent), which end a quote to a reader's eye where the text is read
#: plain (``status``, a log line).
_SPAN_ESCAPES = {ord("`"): "\\x60"} | {
    ord(c): f"\\u{ord(c):04x}" for c in "\u02cb\u02f4\u1fef\u2035\uff40"
}


def code_span(text: str) -> str:
    """``text`` between backticks, each backtick inside it shown as ``\\x60`` (and each
    character drawn like one as ``\\uXXXX``).

    Messages quote host text (a command line, a shell loop) in backticks and name the
    origin after the closing one: a backtick in an argument would end the quote early
    and let the rest of the argument read as the product's own words (``x` started by
    cron /etc/cron.d/pipeline:1 `y``). Shown with the escape :func:`safe_text` uses for
    other characters that would change how the text reads.

    Empty text is quoted as one space (`` ` ` ``): two backticks in a row would be a run
    that CommonMark pairs with the next run of two, the opening of the product's next
    :func:`own_code`, turning the prose between them into code and the product's command
    into plain text.

    Args:
        text: Host text, already shortened (e.g. by :func:`command_text`).

    Returns:
        `` `text` `` with no backtick between the two it adds.
    """
    return "`" + (text.translate(_SPAN_ESCAPES) or " ") + "`"


def own_code(text: str) -> str:
    """The product's own words set as code (a command it advises: ``rogue-watchdog run
    --config PATH``), between two backticks on each side.

    A span of host text is one backtick on each side (:func:`code_span`), and host text
    holds no backtick: in a message, the text between the 2k-th and (2k+1)-th backtick
    is host text. Two on each side leave an empty span before and after ``text``, so
    ``text`` itself sits outside every span: code that looks for the product's words
    (:func:`find_outside_code`, :func:`map_outside_code`, the alert spool's
    ``--config`` rewrite) finds it by where it is, and no command line quoted with
    :func:`code_span`, whatever it spells (`` `rogue-watchdog status --config
    /tmp/evil.yaml` ``), reads as one (CommonMark renders both forms as code).

    Args:
        text: The product's own words; a backtick in it (a ``--config`` path holding
            one) is shown as ``\\x60``, as :func:`code_span` does, so it cannot shift
            the spans after it.

    Returns:
        ``text`` with two backticks before and after it.
    """
    return "``" + text.replace("`", "\\x60") + "``"


#: A word that reads the same quoted or not: nothing that ends a clause (``,``, ``;``,
#: a space, a parenthesis) or opens a span.
_PLAIN_WORD = re.compile(r"[A-Za-z0-9._/+@:=%~-]+")


def plain_or_code(text: str, width: int = 160) -> str:
    """A path or name from the host as a message shows it: as it is when it is one plain
    word (``/home/bob/train.sh``), else in a :func:`code_span` (``/tmp/a, entry since
    disabled.sh`` would otherwise read as the product's own words).

    Args:
        text: Host text.
        width: Most characters of ``text`` kept (:func:`clip`).
    """
    if _PLAIN_WORD.fullmatch(text) and len(text) <= width:
        return text
    return code_span(clip(text, width))


def quoted_command(argv: Sequence[str], width: int) -> str:
    """:func:`command_text` in a :func:`code_span`: how a message shows a command line."""
    return code_span(command_text(argv, width))


def clip(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, its end replaced by ``…`` when cut."""
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


# Messages quote host text only in code spans (:func:`code_span`), which hold no backtick:
# in a message, the text between the 2k-th and (2k+1)-th backtick is host text, the rest
# the product's own words. An unclosed span runs to the end (a message cut mid-quote).


def find_outside_code(text: str, marker: str, start: int = 0) -> int:
    """Where ``marker`` first occurs in ``text`` at or after ``start``, outside every code
    span; -1 when nowhere.

    Code that cuts a message at one of the product's own markers (``; now: its run PID``,
    ``; to stop it:``) must not find it in a quoted command line: an argument holding the
    marker would cut the quote open and drop the origin named after it.

    Args:
        text: A message whose host text is quoted with :func:`code_span`.
        marker: The product's own words; holds no backtick.
        start: Index of ``text`` to search from.

    Returns:
        The index of the first match outside code spans, or -1.
    """
    pos = 0
    for i, segment in enumerate(text.split("`")):
        end = pos + len(segment)
        if i % 2 == 0 and end >= start:
            at = segment.find(marker, max(0, start - pos))
            if at >= 0:
                return pos + at
        pos = end + 1
    return -1


def split_outside_code(text: str, sep: str, maxsplit: int = -1) -> list[str]:
    """``text.split(sep, maxsplit)``, splitting only at a ``sep`` outside code spans
    (:func:`find_outside_code`)."""
    out: list[str] = []
    pos = 0
    while maxsplit < 0 or len(out) < maxsplit:
        at = find_outside_code(text, sep, pos)
        if at < 0:
            break
        out.append(text[pos:at])
        pos = at + len(sep)
    out.append(text[pos:])
    return out


def map_outside_code(text: str, change: Callable[[str], str]) -> str:
    """``text`` with ``change`` applied to each stretch outside code spans; the spans
    (host text) are kept as they are.

    Args:
        text: A message whose host text is quoted with :func:`code_span`.
        change: Rewrites the product's own words, e.g. a regular expression's ``sub``;
            must add or remove no backtick.
    """
    segments = text.split("`")
    return "`".join(change(s) if i % 2 == 0 else s for i, s in enumerate(segments))


def replace_outside_code(text: str, old: str, new: str) -> str:
    """``text.replace(old, new)`` outside code spans only: host text is never rewritten."""
    if old not in text:
        return text
    return map_outside_code(text, lambda s: s.replace(old, new))


def outside_code(text: str) -> str:
    """``text`` with each code span's content removed (its backticks kept): what the
    product itself says, for a search for its own words (``text`` → `` `` ``)."""
    return "`".join(s if i % 2 == 0 else "" for i, s in enumerate(text.split("`")))
