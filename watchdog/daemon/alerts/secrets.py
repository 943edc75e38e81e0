"""Webhook URLs are secrets: read them from the environment or a file, and scrub them
from every error text before it reaches a log, ``status`` or the state database.

Slack and Discord webhook URLs carry their token in the path
(``https://hooks.slack.com/services/T…/B…/XXXX``, ``https://discord.com/api/webhooks/ID/TOKEN``):
whoever has the URL can post. httpx puts the request URL into some exception texts, so
every error goes through :func:`redact` with the URL it was about.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Mapping, Sequence
from urllib.parse import unquote, unquote_plus, urlsplit

from ...config.alerts import SinkSettings
from ...config.base import ConfigError, ConfigRef
from ...safeio import read_regular, untrusted_reason

REDACTED = "<redacted>"
_ANY_URL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+")
# Path segments and query values at least this long are treated as token material.
_TOKEN_MIN = 6


# A webhook URL is a few hundred bytes; anything far larger is a mistake, and it would be
# read again on every retry.
MAX_URL_FILE_BYTES = 64 * 1024


def read_small_file(path: str, limit_bytes: int) -> bytes:
    """Read a regular file of at most ``limit_bytes`` without ever blocking on it
    (see :mod:`watchdog.safeio`: a FIFO would otherwise stall every alert).

    Raises:
        OSError: Cannot open, not a regular file, or larger than ``limit_bytes``
            (``strerror`` says which).
    """
    return read_regular(path, limit_bytes)


class SecretError(RuntimeError):
    """The sink's URL could not be read. The message names where it was looked for
    (an environment variable's name, a file's path), never the value."""


def read_url(sink: SinkSettings, environ: Mapping[str, str] | None = None) -> str:
    """The webhook URL of ``sink``, read fresh on every call (rotation needs no restart).

    Args:
        sink: A webhook sink with ``url_env`` or ``url_file`` (``url_env`` wins).
        environ: Environment to read; None means ``os.environ``.

    Returns:
        The URL with surrounding whitespace (a trailing newline in a file) removed.

    Raises:
        SecretError: The variable is unset or empty, the file is unreadable or empty,
            someone other than root (or the daemon's user) could change the file or a
            directory above it (:func:`~watchdog.safeio.untrusted_reason`: they could
            send the alerts elsewhere), or the value is not an ``http://``/``https://``
            URL.
    """
    env = os.environ if environ is None else environ
    if sink.url_env:
        where = f"environment variable {sink.url_env}"
        value = env.get(sink.url_env, "").strip()
    elif sink.url_file:
        where = f"file {sink.url_file}"
        untrusted = untrusted_reason(sink.url_file)
        if untrusted is not None:
            raise SecretError(f"refused the URL in {where}: {untrusted}")
        try:
            value = read_small_file(sink.url_file, MAX_URL_FILE_BYTES).decode("utf-8").strip()
        except OSError as exc:
            raise SecretError(f"cannot read the URL from {where}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise SecretError(f"the URL in {where} is not UTF-8 text") from None
    else:
        raise SecretError(f"sink {sink.name} names neither url_env nor url_file")
    if not value:
        raise SecretError(f"no URL in {where} (unset or empty)")
    try:
        parts = urlsplit(value)
        usable = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # e.g. an unbalanced IPv6 bracket
        usable = False
    if not usable:
        raise SecretError(f"the value of {where} is not an http(s) URL")
    return value


def secret_fragments(url: str) -> list[str]:
    """Pieces of ``url`` that must never be shown: the URL itself, its path and query,
    userinfo, and every path segment or query value long enough to be a token.

    Returns:
        Longest first, so a replacement never leaves a shorter piece's remainder behind.
    """
    frags = {url, url.rstrip("/"), url.split("://", 1)[-1]}
    try:
        parts = urlsplit(url)
    except ValueError:  # unparseable: hide every long piece between separators
        frags.update(p for p in re.split(r"[/?&=@:]", url) if len(p) >= _TOKEN_MIN)
        return sorted(frags, key=len, reverse=True)
    if parts.path not in ("", "/"):
        frags.add(parts.path)
    if parts.query:
        frags.add(parts.query)
        for pair in parts.query.split("&"):
            value = pair.partition("=")[2]
            if len(value) >= _TOKEN_MIN:
                frags.add(value)
    if parts.username:
        frags.add(parts.username)
    if parts.password:
        frags.add(parts.password)
    frags.update(seg for seg in parts.path.split("/") if len(seg) >= _TOKEN_MIN)
    # A receiver may echo the path percent-decoded ("/e/SECRET%45CHO" → "/e/SECRETECHO").
    frags.update({unquote(f) for f in frags} | {unquote_plus(f) for f in frags})
    return sorted((f for f in frags if f), key=len, reverse=True)


def redact(text: str, url: str | None = None) -> str:
    """``text`` without ``url`` or any piece of it, and without any other URL.

    Args:
        text: An error message (e.g. ``str()`` of an httpx exception).
        url: The secret URL the message may mention; None when it could not be read.

    Returns:
        The text with secret pieces replaced by ``<redacted>`` and any remaining
        ``scheme://…`` replaced by ``<url>``.
    """
    if url:
        for frag in secret_fragments(url):
            text = text.replace(frag, REDACTED)
    return _ANY_URL.sub("<url>", text)


# systemd.exec(5) EnvironmentFile=: KEY=VALUE lines; # and ; start comments.
_ENV_ASSIGN = re.compile(r"\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*")


def read_env_file(path: str) -> dict[str, str]:
    """The assignments of a systemd ``EnvironmentFile=`` (``secrets.env``), for telling
    whether a ``url_env`` variable will be set; quotes around a value are removed.

    Returns:
        Name → value; empty when the file is absent or unreadable.
    """
    try:
        text = read_regular(path, MAX_URL_FILE_BYTES).decode("utf-8", "replace")
    except OSError:
        return {}
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.lstrip().startswith(("#", ";")):
            continue
        m = _ENV_ASSIGN.fullmatch(line)
        if m:
            value = m.group(2)
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            out[m.group(1)] = value
    return out


def check_sink_secrets(
    source: str, refs: Sequence[ConfigRef], environ: Mapping[str, str] | None = None
) -> tuple[list[ConfigError], list[ConfigError]]:
    """What ``check-config`` says about each webhook sink's URL: can it be read now?

    A ``url_env`` variable counts as set when this environment or ``secrets.env`` beside
    the configuration (the shipped unit's ``EnvironmentFile=``) defines it. A
    ``url_file`` must be readable, trusted and hold an http(s) URL; one this non-root
    user may not read is only a warning (the daemon runs as root).

    Args:
        source: The configuration file.
        refs: What it names (``Config.refs``; also on a ``ConfigError`` from
            ``parse_config``, so sinks are checked even when another key is wrong).
        environ: Environment to look in; None means ``os.environ``.

    Returns:
        ``(errors, warnings)``, each naming file, line and key; never a secret's value.
    """
    from ...config import SECRETS_ENV

    env = dict(os.environ if environ is None else environ)
    env_file = os.path.join(os.path.dirname(os.path.abspath(source)), SECRETS_ENV)
    env.update({k: v for k, v in read_env_file(env_file).items() if v.strip()})
    errors: list[ConfigError] = []
    warnings: list[ConfigError] = []
    for ref in refs:
        if not ref.key.startswith("alerts.sinks[") or ref.kind not in ("env", "file"):
            continue
        sink_key = ref.key.rsplit(".", 1)[0]
        sink = SinkSettings(
            type="webhook",
            name=sink_key,
            url_env=ref.value if ref.kind == "env" else None,
            url_file=ref.value if ref.kind == "file" else None,
        )
        try:
            read_url(sink, env)
        except SecretError as exc:
            text = redact(str(exc))
            if sink.url_env and text.startswith("no URL"):
                text = (
                    f"environment variable {sink.url_env} is unset or empty here and "
                    f"{env_file} does not set it: the sink could not send alerts"
                )
            elif sink.url_file and os.geteuid() != 0 and _denied(sink.url_file):
                warnings.append(
                    ConfigError(source, ref.line, ref.key, f"{text}: checked as uid "
                                f"{os.geteuid()}, not as the daemon's user")
                )  # fmt: skip
                continue
            errors.append(ConfigError(source, ref.line, ref.key, text))
    return errors, warnings


def _denied(path: str) -> bool:
    try:
        read_small_file(path, MAX_URL_FILE_BYTES)
    except OSError as exc:
        return exc.errno == errno.EACCES
    return False
