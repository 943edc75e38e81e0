"""The long-running watchdog: the tick loop, its state, alerts and the status socket."""

#: Where ``daemon.socket`` defaults to. Kept here, free of imports, so ``rogue-watchdog
#: status`` without a configuration file finds it without loading the config parser.
DEFAULT_SOCKET = "/run/rogue-watchdog/status.sock"
