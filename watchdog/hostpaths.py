"""Default host paths, declared once: what a Debian host with cron and systemd uses.

Every reader (``lineage``), every actor (``actions``) and the configuration's ``paths:``
section take their defaults from here; tests and fixture trees pass their own. Sources:
cron(8) and crontab(1) of Debian's cron 3.0pl1 (``/etc/crontab``, ``/etc/cron.d``, the
spool ``/var/spool/cron/crontabs``; ``/var/spool/cron`` for cronie), systemd.unit(5)
"System Unit Search Path", and systemctl(1) ``mask`` (links in ``/etc/systemd/system``).
"""

from __future__ import annotations

PROC_ROOT = "/proc"
# Where ``daemon.socket`` defaults to; ``rogue-watchdog status`` without a configuration
# file finds it without loading the config parser.
DEFAULT_SOCKET = "/run/rogue-watchdog/status.sock"
CRONTAB = "/etc/crontab"
CRON_D = "/etc/cron.d"
CRON_SPOOL_DIRS = ("/var/spool/cron/crontabs", "/var/spool/cron")
# systemd.unit(5), system units, highest priority first (the /lib forms for hosts
# without the /usr merge).
UNIT_DIRS = (
    "/etc/systemd/system",
    "/run/systemd/system",
    "/usr/local/lib/systemd/system",
    "/lib/systemd/system",
    "/usr/lib/systemd/system",
)
# Where `systemctl mask` puts its /dev/null link for a system unit (persistent masks).
MASK_DIR = "/etc/systemd/system"
