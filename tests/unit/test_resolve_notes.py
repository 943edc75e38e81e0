"""A resolver's notes are part of its answer (issue 30), not a side channel on the
context that the scan had to clear: they go with whichever origin wins, in the order
found, and nothing carries over from one lineage to the next."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from rogue_watchdog.lineage.base import Answer, ResolveContext, Resolved, with_notes
from rogue_watchdog.model import Origin, Proc
from rogue_watchdog.scan import resolve_origin
from tests.fixtures.proc.fakeproc import FakeProc, make_context


@dataclasses.dataclass
class Fixed:
    """A throwaway resolver answering what it is given."""

    name: str
    answer: Answer = None

    def resolve(self, lineage: Sequence[Proc], ctx: ResolveContext) -> Answer:
        if self.answer == "raise":
            raise RuntimeError("boom")
        return self.answer


def _ctx(tmp_path: Path) -> tuple[list[Proc], ResolveContext]:
    ctx = make_context(tmp_path, [FakeProc(1, 0, ["/sbin/init"]), FakeProc(5, 1, ["x"])])
    return ctx.table.ancestors(5), ctx


def test_notes_go_with_the_winning_origin_in_the_order_found(tmp_path: Path) -> None:
    chain, ctx = _ctx(tmp_path)
    won = Origin(("it is mine",))
    resolvers = [
        Fixed("a", Resolved(None, ("a doubts",))),
        Fixed("b", "raise"),  # type: ignore[arg-type]
        Fixed("c", Resolved(won, ("c doubts", "it is mine"))),
        Fixed("d", Origin(("never asked",))),
    ]
    got = resolve_origin(chain, ctx, resolvers)  # type: ignore[arg-type]
    assert got.evidence == (
        "it is mine", "a doubts", "c doubts", "resolver b failed: RuntimeError: `boom`",
    )  # fmt: skip
    assert not hasattr(ctx, "notes")


def test_no_note_carries_over_to_the_next_lineage(tmp_path: Path) -> None:
    chain, ctx = _ctx(tmp_path)
    first = resolve_origin(chain, ctx, [Fixed("a", Resolved(None, ("a doubts",)))])  # type: ignore[list-item]
    assert "a doubts" in first.evidence
    second = resolve_origin(chain, ctx, [Fixed("b", Origin(("plain",)))])  # type: ignore[list-item]
    assert second.evidence == ("plain",)


def test_with_notes_keeps_the_order_and_a_plain_answer() -> None:
    origin = Origin(("e",))
    assert with_notes(origin, []) is origin
    assert with_notes(None, ["x"]) == Resolved(None, ("x",))
    assert with_notes(Resolved(origin, ("y",)), ["x"]) == Resolved(origin, ("x", "y"))
