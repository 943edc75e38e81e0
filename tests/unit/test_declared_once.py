"""Config sections and restart-only keys are each declared once (issue 30).

A section added to :class:`Config` but not to ``SECTIONS`` (or the reverse), or a
restart-only key that names no setting, fails here; everything else is derived.
"""

from __future__ import annotations

import dataclasses

from rogue_watchdog.config import SECTIONS, TOP_LEVEL_KEYS, Config, parse_config
from rogue_watchdog.daemon.loop import RESTART_ONLY, RESTART_ONLY_KEYS, keep_restart_only

# Fields of Config that are not a section of the file.
NOT_SECTIONS = {"source", "warnings", "refs"}


def test_every_config_field_is_a_declared_section_and_back() -> None:
    fields = {f.name for f in dataclasses.fields(Config)} - NOT_SECTIONS
    names = [name for name, _ in SECTIONS]
    assert len(names) == len(set(names))
    assert set(names) == fields
    assert tuple(names) == TOP_LEVEL_KEYS


def test_an_empty_file_and_every_empty_section_give_the_defaults() -> None:
    # Each declared section is read into its own field (no section parsed into another).
    assert parse_config("") == Config(source="<string>")
    text = "".join(f"{name}: {{}}\n" for name, _ in SECTIONS if name not in LISTS)
    got = parse_config(text)
    want = Config(source="<string>")
    for name, _ in SECTIONS:
        if name not in LISTS:
            assert getattr(got, name) == getattr(want, name), name


LISTS = {"sanctioned", "ignore", "ship_gates", "ignore_defaults"}


def test_restart_only_keys_name_settings_and_all_keep_their_running_value() -> None:
    assert [k for k, _ in RESTART_ONLY] == list(RESTART_ONLY_KEYS)
    running = Config()
    new = parse_config(
        "daemon: {state_dir: /srv/s, socket: /srv/s.sock, socket_group: root,"
        " metrics_listen: '127.0.0.1:9911', events: 'off', events_rcvbuf_bytes: 1048576,"
        " fd_sweep_interval_s: 7}\n"
        "paths: {proc_root: /srv/proc}\nnvml: {library: /srv/lib/libnvidia-ml.so.1}\n"
    )
    kept, changed = keep_restart_only(running, new)
    assert changed == list(RESTART_ONLY_KEYS)  # the file changes every one of them
    for key, get in RESTART_ONLY:
        section, _, name = key.partition(".")
        assert name in {f.name for f in dataclasses.fields(getattr(running, section))}
        assert get(kept) == get(running), key
    assert kept.daemon.fd_sweep_interval_s == 7  # every other key takes effect
