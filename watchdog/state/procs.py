"""Process identities that must survive a daemon restart: the processes of sanctioned
jobs (``sanctioned_procs``) and the processes seen below a slurmstepd
(``slurm_members``). An identity is PID + start ticks, of one boot (``boot_id``).
"""

from __future__ import annotations

from .table import Table, _int_or_none, clean


class ProcTable(Table):
    """Sanctioned processes and Slurm job members, per boot."""

    def sanctioned_procs(self, boot_id: str | None) -> dict[tuple[int, int], str]:
        """``(PID, start ticks) -> rule`` of the processes recorded as sanctioned during
        boot ``boot_id`` (``/proc/sys/kernel/random/boot_id``): start ticks count from
        boot, so an identity of another boot names nothing and is never returned."""
        rows = self.conn.execute(
            "SELECT pid, start_ticks, rule FROM sanctioned_procs WHERE boot_id IS ?", (boot_id,)
        )
        return {(int(r[0]), int(r[1])): str(r[2]) for r in rows}

    def sanctioned_matched(self, boot_id: str | None) -> dict[tuple[int, int], float]:
        """``(PID, start ticks) -> POSIX time`` a rule matched each recorded sanctioned
        process of boot ``boot_id`` that had been judged rogue before (``rogue_before``;
        ``since`` is then the time of that match)."""
        rows = self.conn.execute(
            "SELECT pid, start_ticks, since FROM sanctioned_procs"
            " WHERE boot_id IS ? AND rogue_before",
            (boot_id,),
        )
        return {(int(r[0]), int(r[1])): float(r[2]) for r in rows}

    def set_sanctioned_procs(
        self,
        procs: dict[tuple[int, int], str],
        boot_id: str | None,
        now: float,
        matched: dict[tuple[int, int], float] | None = None,
    ) -> None:
        """Make ``sanctioned_procs`` hold exactly ``procs`` (``(PID, start) -> rule``),
        keeping the ``since`` of identities already there. ``matched``: the new ones a
        rule matched while they ran, after they were judged rogue, with the time of that
        match (their ``since``, ``rogue_before`` 1)."""
        matched = matched or {}
        with self.transaction():
            have = {
                (int(r[0]), int(r[1]))
                for r in self.conn.execute("SELECT pid, start_ticks FROM sanctioned_procs")
            }
            gone = have - set(procs)
            self.conn.executemany(
                "DELETE FROM sanctioned_procs WHERE pid=? AND start_ticks=?", sorted(gone)
            )
            self.conn.executemany(
                "INSERT OR IGNORE INTO sanctioned_procs(pid, start_ticks, rule, since, boot_id,"
                " rogue_before) VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (
                        pid,
                        start,
                        clean(rule),
                        matched.get((pid, start), now),
                        boot_id,
                        int((pid, start) in matched),
                    )
                    for (pid, start), rule in procs.items()
                ],
            )

    def slurm_members(self, boot_id: str | None) -> dict[tuple[int, int], tuple[int, int | None]]:
        """``(PID, start ticks) -> (job id, uid)`` of the processes seen below a
        slurmstepd during boot ``boot_id`` (see :func:`read_slurm_members`)."""
        rows = self.conn.execute(
            "SELECT pid, start_ticks, job_id, uid FROM slurm_members WHERE boot_id IS ?",
            (boot_id,),
        )
        return {(int(r[0]), int(r[1])): (int(r[2]), _int_or_none(r[3])) for r in rows}

    def set_slurm_members(
        self,
        members: dict[tuple[int, int], tuple[int, int | None]],
        boot_id: str | None,
        now: float,
    ) -> None:
        """Make ``slurm_members`` hold exactly ``members`` (the ones still alive)."""
        with self.transaction():
            self.conn.execute("DELETE FROM slurm_members")
            self.conn.executemany(
                "INSERT INTO slurm_members(pid, start_ticks, job_id, uid, seen_at, boot_id)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                [(p, s, j, u, now, boot_id) for (p, s), (j, u) in members.items()],
            )
