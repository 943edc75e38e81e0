"""Default host paths, declared once: what a Debian host with cron and systemd uses.

Every reader (``lineage``), every actor (``actions``) and the configuration's ``paths:``
section take their defaults from here; tests and fixture trees pass their own. Sources:
cron(8) and crontab(1) of Debian's cron 3.0pl1 (``/etc/crontab``, ``/etc/cron.d``, the
spool ``/var/spool/cron/crontabs``; ``/var/spool/cron`` for cronie), systemd.unit(5)
"System Unit Search Path", and systemctl(1) ``mask`` (links in ``/etc/systemd/system``).
"""

from __future__ import annotations

PROC_ROOT = "/proc"
#: Where the cgroup hierarchies are mounted (the v1 ``devices`` one at ``devices/``).
CGROUP_ROOT = "/sys/fs/cgroup"
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
# The configuration file a command reads when neither ``--config`` nor a running daemon
# names another (watchdog.cli.common.resolve_config_path).
DEFAULT_CONFIG = "/etc/rogue-watchdog/config.yaml"


def config_args(source: str | None) -> str:
    """The ``--config PATH`` a printed command needs to run under the configuration read
    from ``source``, with a leading space; empty for the default file or no file.

    A hint (``rogue-watchdog disable-source F98``) is pasted into another shell, maybe in
    another directory, where the daemon cannot be asked which file it runs with: a
    command found without ``--config`` would judge, guard and read history under the
    default file's rules and state directory, not the ones that made the hint.

    Args:
        source: ``Config.source``: a path as given, or ``<defaults>`` and the like (no file).

    Returns:
        ``" --config /abs/path"`` (shell-quoted), or ``""``.
    """
    import os
    import shlex

    if not source or source.startswith("<"):
        return ""
    path = os.path.abspath(source)
    return "" if path == DEFAULT_CONFIG else f" --config {shlex.quote(path)}"


def config_file(source: str | None) -> str | None:
    """The absolute path of the configuration file read from ``source``, or None when
    none was read (``<defaults>`` and the like): what a spooled alert records as the
    configuration that wrote it (:func:`watchdog.daemon.alerts.adopt.adopted`).

    Args:
        source: ``Config.source``.
    """
    import os

    if not source or source.startswith("<"):
        return None
    return os.path.abspath(source)


#: The unit scripts/install.sh and the Debian package install (systemd/).
UNIT_NAME = "rogue-watchdog.service"
#: Exists while systemd is PID 1 (sd_booted(3)).
SYSTEMD_RUN_DIR = "/run/systemd/system"


def systemctl_offered(
    source: str | None,
    run_dir: str = SYSTEMD_RUN_DIR,
    unit_dirs: tuple[str, ...] = UNIT_DIRS,
) -> bool:
    """Whether a printed hint may say ``systemctl … rogue-watchdog`` for the instance
    configured by ``source``: systemd is PID 1, the unit is installed, and the instance is
    the unit's (the default file, which the unit runs with). Elsewhere the command fails
    (`System has not been booted with systemd as init system`) or acts on another
    instance (issue 33, fresh user D).

    Args:
        source: ``Config.source`` (or the ``--config`` given); None or ``<defaults>``
            for built-in defaults.
        run_dir: ``/run/systemd/system`` (tests pass their own).
        unit_dirs: Where unit files are looked for (:data:`UNIT_DIRS`).
    """
    import os

    if config_args(source) or not os.path.isdir(run_dir):
        return False
    return any(os.path.exists(os.path.join(d, UNIT_NAME)) for d in unit_dirs)
