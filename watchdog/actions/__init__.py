"""Hands: terminate rogue jobs, disable their source with a backup, undo; rogue services."""
