"""``python -m watchdog`` runs the rogue-watchdog command line."""

import sys

try:
    from .cli import main
except Exception as exc:  # a broken installation must not exit 1 ("non-finite", "rogue")
    print(f"rogue-watchdog: internal error (exit 70): cannot load: {exc!r}", file=sys.stderr)
    sys.exit(70)

sys.exit(main())
