"""rogue-watchdog: finds training jobs running outside the sanctioned pipeline on GPU hosts.

The source folder is ``watchdog/``; it installs as the import package ``rogue_watchdog``
(``pip install rogue-watchdog``; ``from rogue_watchdog.weights import verify``), so PyPI's
``watchdog`` can share its environment. Imports inside the package are relative: the code
never names its own package (docs/dependencies.md). Layers: ``sources`` (procfs, NVML, device
fds) → ``lineage`` (origin resolvers) → ``policy`` (jobs, allowlist, findings), with
``cli`` at the edge and ``weights`` beside.
"""

__version__ = "0.1.0"
