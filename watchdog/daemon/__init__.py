"""The long-running watchdog: the tick loop, its state, alerts and the status socket."""
