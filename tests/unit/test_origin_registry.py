"""An origin kind is one file plus a line in each typed list (docs/architecture.md,
"Adding an origin kind"): a throwaway kind defined here (its record and its resolver, in
no module of the package), handed in through the same typed lists the package's own
kinds are in (``model.ORIGIN_KINDS``, ``lineage.RESOLVERS``), is found by a real scan
of real processes, sanctioned or judged rogue by its own allowlist key, read back from
its JSON, described in findings, and refused by ``disable-source``, no other module edited."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, get_args

import pytest

from rogue_watchdog import lineage
from rogue_watchdog.actions.effects import RecordingEffects
from rogue_watchdog.actions.planners import PLANNERS, plan_disable
from rogue_watchdog.config import ConfigError, parse_config
from rogue_watchdog.config.origins import pin_keys
from rogue_watchdog.lineage import RESOLVERS, default_resolvers
from rogue_watchdog.lineage.base import ResolveContext
from rogue_watchdog.model import (
    ORIGIN_KINDS,
    Origin,
    OriginKind,
    PinKey,
    Proc,
    origin_from_json,
    origins,
)
from rogue_watchdog.policy.allowlist import origin_mismatch
from rogue_watchdog.scan import Scanner
from tests.conftest import Spawned
from tests.unit.test_jobs import WORKER_TREE, config_for, make_dev, wait_for

MARK = "nomad-job="


@dataclass(frozen=True)
class NomadOrigin(Origin):
    """A job of a scheduler the package does not know (defined only here)."""

    kind: ClassVar[str] = "nomad"
    SOURCE_FIELDS: ClassVar[tuple[str, ...]] = ("job",)
    PINS: ClassVar[Mapping[str, PinKey]] = {"nomad_job": PinKey("Nomad job", field="job")}
    job: str | None = None

    def describe(self) -> str:
        return f"Nomad job {self.job}"

    def label(self) -> str:
        return self.job or ""

    @property
    def definite(self) -> bool:
        return True

    def pin(self) -> dict[str, object] | None:
        return {"nomad_job": self.job} if self.job else None

    def stop_targets(self) -> tuple[tuple[object, ...], ...]:
        return (("nomad-job", self.job),)


class NomadResolver:
    """Names a process whose command line carries ``nomad-job=NAME``."""

    name = "nomad"

    def resolve(self, lineage: Sequence[Proc], ctx: ResolveContext) -> Origin | None:
        for arg in lineage[0].cmdline:
            if arg.startswith(MARK):
                return NomadOrigin(job=arg[len(MARK) :], evidence=("nomad-job on its line",))
        return None


@pytest.fixture
def nomad(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # The lines a new kind adds, one in each typed list (ahead of slurm: the most
    # specific spawner first), handed in in place of the package's own lists.
    monkeypatch.setattr(origins, "ORIGIN_KINDS", (NomadOrigin, *ORIGIN_KINDS))
    monkeypatch.setattr(lineage, "RESOLVERS", (NomadResolver, *RESOLVERS))
    yield


def test_the_built_in_kinds_are_listed_once_in_priority_order() -> None:
    names = tuple(cls.kind for cls in ORIGIN_KINDS)
    assert names == (
        "slurm", "kubernetes", "container", "cron", "at", "supervisor", "shell", "systemd",
        "orphan", "unknown",
    )  # fmt: skip
    assert len(set(ORIGIN_KINDS)) == len(ORIGIN_KINDS)
    # The Literal the built-in kinds are typed with (``ignore[].origin_kind``) names them.
    assert set(get_args(OriginKind)) == set(names)
    # Each resolver answers for the kind at its place; the unknown kind has none.
    assert [r.name for r in default_resolvers()] == list(names[:-1])
    # Every planner is for a listed kind; a kind without one is refused by disable-source.
    assert set(PLANNERS) <= set(ORIGIN_KINDS)
    assert {cls.kind for cls in PLANNERS} == {
        "container", "cron", "at", "supervisor", "systemd", "orphan", "unknown",
    }  # fmt: skip


def test_a_registered_kind_answers_for_itself_everywhere(nomad: None) -> None:
    assert default_resolvers()[0].name == "nomad"
    assert pin_keys()["nomad_job"] is NomadOrigin
    # Read back from its JSON (the state store, the status socket).
    seen = NomadOrigin(job="train", evidence=("e",), remediation="nomad job stop train")
    assert origin_from_json(seen.to_json()) == seen
    # Its allowlist key loads and judges; two kinds in one pin never match.
    cfg = parse_config(
        "sanctioned:\n  - name: n\n    cmdline: '*'\n    origin: {nomad_job: 'tr*'}\n", "c.yaml"
    )
    pin = cfg.sanctioned[0].origin
    assert pin.text() == "nomad_job=tr*"
    assert origin_mismatch(pin, NomadOrigin(job="train")) is None
    assert origin_mismatch(pin, NomadOrigin(job="ghost")) == "origin must be Nomad job 'tr*'"
    with pytest.raises(ConfigError, match="keys of different origin kinds"):
        parse_config(
            "sanctioned:\n  - name: n\n    cmdline: '*'\n"
            "    origin: {nomad_job: a, cron_file: /etc/crontab}\n",
            "c.yaml",
        )
    # disable-source has no planner for it: it refuses and says what to run by hand.
    plan = plan_disable(
        seen, reason="r", now=0.0, backup_dir="/nonexistent", effects=RecordingEffects()
    )
    assert plan.refused == (
        "disabling a nomad source is not supported; run the remediation by hand: "
        "nomad job stop train"
    )


def test_unregistered_its_key_is_unknown_and_its_record_reads_as_unknown() -> None:
    with pytest.raises(ConfigError, match="nomad_job"):
        parse_config(
            "sanctioned:\n  - name: n\n    cmdline: '*'\n    origin: {nomad_job: a}\n", "c.yaml"
        )
    assert type(origin_from_json({"kind": "nomad", "job": "train"})) is Origin


def test_a_real_scan_finds_judges_and_guards_the_new_kind(
    nomad: None, spawned: Spawned, tmp_path: Path
) -> None:
    devdir = make_dev(tmp_path)
    script = tmp_path / "dataloader_pool.py"
    script.write_text(WORKER_TREE)
    procs = {}
    for name in ("train", "ghost"):
        kids = tmp_path / f"kids-{name}"
        procs[name] = spawned.start(
            [sys.executable, str(script), str(devdir / "nvidia0"), "1", str(kids), MARK + name]
        )
        wait_for(kids)
    rule = (
        "sanctioned:\n  - name: nomad-train\n"
        f"    cmdline: '*{MARK}train'\n    origin: {{nomad_job: train}}\n"
        f"  - name: nomad-ghost-line\n    cmdline: '*{MARK}ghost'\n"
        "    origin: {nomad_job: train}\n"
    )
    result = Scanner(config_for(devdir, rule)).scan()
    jobs = {j.root_pid: j for j in result.jobs}
    train, ghost = jobs[procs["train"].pid], jobs[procs["ghost"].pid]
    assert (train.origin, train.verdict) == (
        NomadOrigin(job="train", evidence=("nomad-job on its line",)),
        "sanctioned",
    )
    assert (type(ghost.origin), ghost.verdict) == (NomadOrigin, "rogue")
    [finding] = [f for f in result.findings if f.root_pid == ghost.root_pid]
    assert finding.kind == "rogue-job"
    assert "Nomad job ghost" in finding.message
    assert "origin must be Nomad job 'train'" in (ghost.reason or "")
    assert (finding.details["origin_kind"], finding.details["origin_label"]) == ("nomad", "ghost")
    # The guard: the sanctioned run is never a target; the ghost's own processes are,
    # and disable-source, having no planner for the kind, is not offered.
    assert train.advice.refused is not None and train.advice.stop_pids == ()
    assert ghost.advice.refused is None
    assert sorted(ghost.advice.stop_pids) == sorted(ghost.pids)
    assert ghost.advice.disable is False


def test_the_recipe_names_the_lists_the_fixture_hands_in() -> None:
    # docs/architecture.md, "Adding an origin kind": the files and lists it names are the
    # ones this module's fixture extends (and the planner list, for a kind it disables).
    text = (Path(__file__).parents[2] / "docs" / "architecture.md").read_text()
    recipe = text.split("### Adding an origin kind", 1)[1].split("\n## ", 1)[0]
    for named in (
        "watchdog/model/origins.py", "`ORIGIN_KINDS`", "watchdog/lineage/nomad.py",
        "`lineage.RESOLVERS`", "`actions/planners.PLANNERS`",
    ):  # fmt: skip
        assert named in recipe, named
    assert origins.ORIGIN_KINDS is ORIGIN_KINDS and lineage.RESOLVERS is RESOLVERS
    assert all(isinstance(c, type) and issubclass(c, Origin) for c in ORIGIN_KINDS)
    assert all(cls in ORIGIN_KINDS for cls in PLANNERS)


def test_kind_knowledge_the_guard_and_services_ask_the_record_for() -> None:
    # Once `kind == "cron"` and `kind in (...)` ladders in policy/ (issue 30): the same
    # answers, from the records.
    from rogue_watchdog.model import CronOrigin, OrphanOrigin, ShellOrigin, SystemdOrigin

    assert CronOrigin().one_at_a_time() == (
        "run the line's command under `flock -n LOCKFILE` so a run never starts while one "
        "is running"
    )
    assert SystemdOrigin().one_at_a_time() == "make the source start one run at a time"
    no_source = {c.kind for c in ORIGIN_KINDS if not c.SOURCE_FIELDS}
    assert no_source == {"shell", "orphan", "unknown"}
    assert [o.by_hand for o in (ShellOrigin(), OrphanOrigin(), Origin())] == [True, False, False]
