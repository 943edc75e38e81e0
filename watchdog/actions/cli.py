"""CLI for actions: ``disable-source``, ``undo``, ``actions`` (filled by the enforcement work)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the action subcommands to the CLI."""
