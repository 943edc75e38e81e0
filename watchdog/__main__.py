"""``python -m watchdog`` runs the rogue-watchdog command line."""

import sys

from watchdog.cli import main

sys.exit(main())
