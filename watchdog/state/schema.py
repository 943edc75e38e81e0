"""The schema of ``state.db``: its version and the ordered migrations that build it.

A database is upgraded in place, one migration per transaction, by :func:`migrate`
(called by :class:`~watchdog.state.store.Store` whenever it opens or recreates the
file). Each migration's SQL is the released text, never edited: an existing database
must end up exactly as it did when that version shipped.
"""

from __future__ import annotations

import sqlite3

# The schema is versioned with ``PRAGMA user_version``: MIGRATIONS[i] upgrades version i
# to i + 1, in order, each in one transaction. Never edit a released entry; append one.
# (Databases written before ``user_version`` was used say ``schema_version 1`` in ``meta``.)
_SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    signature TEXT PRIMARY KEY,
    summary TEXT NOT NULL,
    user TEXT,
    verdict TEXT NOT NULL,
    origin_json TEXT NOT NULL,
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL,
    root_pid INTEGER NOT NULL,
    start_ticks INTEGER NOT NULL,
    pids_json TEXT NOT NULL,
    gone_at REAL,
    sightings INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS findings (
    id INTEGER PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    kind TEXT NOT NULL,
    severity TEXT NOT NULL,
    message TEXT NOT NULL,
    root_pid INTEGER,
    details_json TEXT NOT NULL,
    opened_at REAL NOT NULL,
    last_seen REAL NOT NULL,
    seen_count INTEGER NOT NULL DEFAULT 1,
    resolved_at REAL,
    last_alert_at REAL
);
CREATE UNIQUE INDEX IF NOT EXISTS findings_open
    ON findings(fingerprint) WHERE resolved_at IS NULL;
CREATE TABLE IF NOT EXISTS deliveries (
    id INTEGER PRIMARY KEY,
    finding_id INTEGER NOT NULL,
    sink TEXT NOT NULL,
    event TEXT NOT NULL,
    payload_json TEXT NOT NULL,
    created_at REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL NOT NULL,
    delivered_at REAL,
    last_error TEXT
);
CREATE INDEX IF NOT EXISTS deliveries_pending
    ON deliveries(next_attempt_at) WHERE delivered_at IS NULL;
CREATE TABLE IF NOT EXISTS actions (
    id INTEGER PRIMARY KEY,
    created_at REAL NOT NULL,
    actor TEXT NOT NULL,
    kind TEXT NOT NULL,
    target TEXT NOT NULL,
    finding_id INTEGER,
    signature TEXT,
    dry_run INTEGER NOT NULL DEFAULT 0,
    outcome TEXT NOT NULL,
    details_json TEXT NOT NULL,
    undo_json TEXT,
    undone_at REAL
);
INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', '1');
"""

# Version 2: dead letters, instance counts of folded findings, delivery counters that
# survive retention, and the indexes every per-tick query uses (none scans a table).
_SCHEMA_V2 = """
ALTER TABLE deliveries ADD COLUMN dead_at REAL;
ALTER TABLE findings ADD COLUMN instances INTEGER NOT NULL DEFAULT 1;
ALTER TABLE findings ADD COLUMN alerted_instances INTEGER;
ALTER TABLE findings ADD COLUMN alerted_pids_json TEXT;
CREATE TABLE sink_stats (
    sink TEXT PRIMARY KEY,
    delivered INTEGER NOT NULL DEFAULT 0,
    failed_attempts INTEGER NOT NULL DEFAULT 0,
    dead_lettered INTEGER NOT NULL DEFAULT 0
);
INSERT INTO sink_stats(sink, delivered, failed_attempts)
    SELECT sink, SUM(delivered_at IS NOT NULL), SUM(attempts) - SUM(delivered_at IS NOT NULL)
    FROM deliveries GROUP BY sink;
CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL DEFAULT 0);
DROP INDEX IF EXISTS deliveries_pending;
CREATE INDEX deliveries_queue ON deliveries(sink, id)
    WHERE delivered_at IS NULL AND dead_at IS NULL;
CREATE INDEX deliveries_errors ON deliveries(id) WHERE last_error IS NOT NULL;
CREATE INDEX deliveries_finding ON deliveries(finding_id);
CREATE INDEX deliveries_done ON deliveries(created_at)
    WHERE delivered_at IS NOT NULL OR dead_at IS NOT NULL;
CREATE INDEX findings_resolved ON findings(resolved_at) WHERE resolved_at IS NOT NULL;
CREATE INDEX jobs_present ON jobs(first_seen) WHERE gone_at IS NULL;
CREATE INDEX jobs_gone ON jobs(gone_at) WHERE gone_at IS NOT NULL;
UPDATE meta SET value='2' WHERE key='schema_version';
"""

# Version 3: the processes of sanctioned jobs, so a sanctioned process stays sanctioned
# for its life across daemon restarts (identity: PID + start ticks, of one boot); and
# the routing facts (GPUs, user, origin) a finding's last alert carried, so an alert
# whose labels would change is resolved explicitly under its old labels; and the
# processes seen below a slurmstepd, so a job's leftover is proven the job's after the
# job ended (its environment only claims it).
_SCHEMA_V3 = """
CREATE TABLE sanctioned_procs (
    pid INTEGER NOT NULL,
    start_ticks INTEGER NOT NULL,
    rule TEXT NOT NULL,
    since REAL NOT NULL,
    boot_id TEXT,
    PRIMARY KEY (pid, start_ticks)
);
ALTER TABLE findings ADD COLUMN alerted_routing_json TEXT;
CREATE TABLE slurm_members (
    pid INTEGER NOT NULL,
    start_ticks INTEGER NOT NULL,
    job_id INTEGER NOT NULL,
    uid INTEGER,
    seen_at REAL NOT NULL,
    boot_id TEXT,
    PRIMARY KEY (pid, start_ticks)
);
UPDATE meta SET value='3' WHERE key='schema_version';
"""

# Version 4: every run of every job (one row per root process, where ``jobs`` keeps one
# per signature), for the learning period: ``allowlist suggest`` needs how often a job
# ran, how many ran at once and what it held, and ``allowlist diff`` replays the runs.
_SCHEMA_V4 = """
CREATE TABLE job_runs (
    signature TEXT NOT NULL,
    root_pid INTEGER NOT NULL,
    start_ticks INTEGER NOT NULL,
    user TEXT,
    cmdline_json TEXT NOT NULL,
    origin_json TEXT NOT NULL,
    verdict TEXT NOT NULL,
    rule TEXT,
    started_at REAL NOT NULL,
    last_seen REAL NOT NULL,
    gpu_s REAL NOT NULL DEFAULT 0,
    gpus_json TEXT NOT NULL DEFAULT '[]',
    max_gpu_bytes INTEGER,
    PRIMARY KEY (root_pid, start_ticks, signature)
);
CREATE INDEX job_runs_seen ON job_runs(last_seen);
UPDATE meta SET value='4' WHERE key='schema_version';
"""

# Next version: finding ids are never reused, ever (issue 32, case 5: retention deleted
# the newest finding and the next one took its id, so two jobs were alerted as F2). An
# ``INTEGER PRIMARY KEY`` reuses the largest id once its row is gone; AUTOINCREMENT
# keeps the largest id ever given in ``sqlite_sequence``. SQLite cannot add it to a
# column, so the table is rebuilt (same columns, same rows, same indexes).
_SCHEMA_FINDING_IDS = """
CREATE TABLE findings_v (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    fingerprint TEXT NOT NULL,
    kind TEXT NOT NULL,
    severity TEXT NOT NULL,
    message TEXT NOT NULL,
    root_pid INTEGER,
    details_json TEXT NOT NULL,
    opened_at REAL NOT NULL,
    last_seen REAL NOT NULL,
    seen_count INTEGER NOT NULL DEFAULT 1,
    resolved_at REAL,
    last_alert_at REAL,
    instances INTEGER NOT NULL DEFAULT 1,
    alerted_instances INTEGER,
    alerted_pids_json TEXT,
    alerted_routing_json TEXT
);
INSERT INTO findings_v SELECT id, fingerprint, kind, severity, message, root_pid,
    details_json, opened_at, last_seen, seen_count, resolved_at, last_alert_at, instances,
    alerted_instances, alerted_pids_json, alerted_routing_json FROM findings;
DROP TABLE findings;
ALTER TABLE findings_v RENAME TO findings;
CREATE UNIQUE INDEX findings_open ON findings(fingerprint) WHERE resolved_at IS NULL;
CREATE INDEX findings_resolved ON findings(resolved_at) WHERE resolved_at IS NOT NULL;
UPDATE meta SET value='5' WHERE key='schema_version';
"""

# Next version: each run's workload class and its evidence (issue 35): learning proposes
# exemptions for the classes that are not training, and the report counts them apart.
# Runs recorded before have none (NULL: read as no class known).
_SCHEMA_WORKLOAD = """
ALTER TABLE job_runs ADD COLUMN workload TEXT;
ALTER TABLE job_runs ADD COLUMN workload_evidence_json TEXT;
UPDATE meta SET value='6' WHERE key='schema_version';
"""

# Version 7: write-ahead records of actions (issue 32, case 4: a terminate killed while it
# waited out its grace left no record of the signals it had sent, and the restarted
# daemon signalled the same process again; a quarantine killed between its rename and its
# record left a model in quarantine with no finding, no action and no undo). An action's
# row is written before its first side effect (``state`` 'pending', ``owner_json`` the
# process doing it), each side effect is written as a step before it is made and marked
# when it was, and the row is finished last. A row left 'pending' or 'recovering' whose
# owner is gone was interrupted half-way: the steps say what was done and what was not.
_SCHEMA_ACTION_STEPS = """
ALTER TABLE actions ADD COLUMN state TEXT NOT NULL DEFAULT 'done';
ALTER TABLE actions ADD COLUMN owner_json TEXT;
ALTER TABLE actions ADD COLUMN finished_at REAL;
CREATE TABLE action_steps (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    action_id INTEGER NOT NULL,
    at REAL NOT NULL,
    op TEXT NOT NULL,
    status TEXT NOT NULL,
    detail_json TEXT NOT NULL,
    result_json TEXT
);
CREATE INDEX action_steps_of ON action_steps(action_id, id);
CREATE INDEX actions_unfinished ON actions(id) WHERE state IN ('pending', 'recovering');
CREATE INDEX actions_interrupted ON actions(finished_at) WHERE state = 'interrupted';
UPDATE meta SET value='7' WHERE key='schema_version';
"""

# Version 8: whether a sanctioned process had been judged rogue before a rule matched it
# while it ran (the operator added the rule then): its reason says "from TIME (matched
# while it ran; it was rogue before)", not "when it started"; ``since`` is that time.
_SCHEMA_SANCTIONED_MIDRUN = """
ALTER TABLE sanctioned_procs ADD COLUMN rogue_before INTEGER NOT NULL DEFAULT 0;
UPDATE meta SET value='8' WHERE key='schema_version';
"""

MIGRATIONS: tuple[str, ...] = (
    _SCHEMA_V1,
    _SCHEMA_V2,
    _SCHEMA_V3,
    _SCHEMA_V4,
    _SCHEMA_FINDING_IDS,
    _SCHEMA_WORKLOAD,
    _SCHEMA_ACTION_STEPS,
    _SCHEMA_SANCTIONED_MIDRUN,
)
SCHEMA_VERSION = len(MIGRATIONS)


class _NewerSchema(sqlite3.DatabaseError):
    """The database was written by a newer rogue-watchdog."""


def schema_version(conn: sqlite3.Connection) -> int:
    """The schema version of an open database: ``PRAGMA user_version``, or 1 for a
    database written before it was used (``meta.schema_version`` 1), or 0 when empty."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version:
        return version
    has_meta = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'"
    ).fetchone()
    if has_meta is None:
        return 0
    row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    return int(row[0]) if row is not None and str(row[0]).isdigit() else 0


def migrate(conn: sqlite3.Connection) -> int:
    """Bring an open database to :data:`SCHEMA_VERSION`, applying each missing entry of
    :data:`MIGRATIONS` in order, each in its own transaction with the new
    ``PRAGMA user_version``.

    Returns:
        The version found before migrating.

    Raises:
        sqlite3.DatabaseError: The database is newer than this code (``_NewerSchema``),
            or a migration failed (that migration is rolled back).
    """
    found = schema_version(conn)
    if found > SCHEMA_VERSION:
        raise _NewerSchema(
            f"{conn.execute('PRAGMA database_list').fetchone()[2]}: schema version {found} "
            f"is newer than this rogue-watchdog ({SCHEMA_VERSION}); refusing to touch it"
        )
    for version in range(found, SCHEMA_VERSION):
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _statements(MIGRATIONS[version]):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version={version + 1}")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    return found


def _statements(script: str) -> list[str]:
    """Split a migration script into statements (``sqlite3.complete_statement``)."""
    out, current = [], ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            out.append(current.strip())
            current = ""
    if current.strip():
        out.append(current.strip())
    return out
