"""The one build step pyproject.toml cannot declare stably: the optional C extension.

``rogue_watchdog.weights._finitec`` (watchdog/weights/_finitec.c) is the compiled
non-finite check of F16/BF16/FP8 tensors (issue 34, item 4; numbers in
docs/performance.md). ``optional=True``: where no C compiler or no Python headers are
found, pip installs the package without it and rogue_watchdog.weights.finite keeps
numpy's reductions. An editable install (``pip install -e``, scripts/setup.sh --test)
builds it in place, beside its source (ignored by git). Everything else is in
pyproject.toml; setuptools' own ``[tool.setuptools.ext-modules]`` table is still marked
experimental and warns at every build, so the extension is declared here.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "rogue_watchdog.weights._finitec",
            sources=["watchdog/weights/_finitec.c"],
            optional=True,
        )
    ]
)
