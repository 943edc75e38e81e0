"""The tracker's phases, one module each; :class:`watchdog.daemon.tracker.Tracker`
composes them once per tick.

- :mod:`.jobs`: remember each job by its signature (``jobs`` and ``runs`` tables) and
  open a ``respawned`` finding when a rogue signature comes back;
- :mod:`.naming`: what a finding's message says beyond the scan's text (the operator's
  undo that re-enabled its source, the finding's own id in its commands);
- :mod:`.fold`: one finding per fingerprint, naming every instance of the job;
- :mod:`.lifecycle`: which findings open, are seen again, or resolve;
- :mod:`.incident`: a job's return is one page, its ``respawned``: the findings about
  the run that came back are folded into it;
- :mod:`.reminders`: which alert (if any) a finding is due: the debounced open, a
  reminder, a change of its instances or of what the alert is identified by;
- :mod:`.spool`: the alert document and the sinks that accept it.

Each phase takes values and returns a finished value; only the tracker writes the
findings table and the spool.
"""
