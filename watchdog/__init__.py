"""rogue-watchdog: finds training jobs running outside the sanctioned pipeline on GPU hosts.

The import package is ``watchdog`` (PyPI's ``watchdog`` shares the name, so the product
installs into its own virtual environment). Layers: ``sources`` (procfs, NVML, device
fds) → ``lineage`` (origin resolvers) → ``policy`` (jobs, allowlist, findings), with
``cli`` at the edge and ``weights`` beside.
"""

__version__ = "0.1.0"
