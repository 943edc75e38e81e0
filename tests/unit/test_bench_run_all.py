"""bench/run_all.py's table: the rows, the verdicts and the splice into a document.

Only the pure formatting part; no benchmark runs and no timing is asserted.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.conftest import REPO


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_run_all", REPO / "bench" / "run_all.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up by name
    spec.loader.exec_module(module)
    return module


def test_table_rows_and_verdicts() -> None:
    m = load()
    met, miss = m.ratio_aim(2.5, 1.0)
    assert (met, miss) == (False, "2.50x over")
    assert m.ratio_aim(0.8, 0.9, at_least=True) == (False, "1.12x short")
    assert m.ratio_aim(0.04, 0.05) == (True, "")
    rows = [
        m.Row("`scan` one-shot", "0.672 s | 41 MiB", "nvitop 0.267 s", "<= 1.0x", met, miss),
        m.Row("caught", "10 / 10", aim="10 / 10", met=True),
        m.Row("peers", "not installed"),
    ]
    assert m.markdown_table(rows).splitlines() == [
        "| what | now | peer or limit | aim | verdict |",
        "|---|---|---|---|---|",
        "| `scan` one-shot | 0.672 s \\| 41 MiB | nvitop 0.267 s | <= 1.0x | missed (2.50x over) |",
        "| caught | 10 / 10 | - | 10 / 10 | met |",
        "| peers | not installed | - | - | - |",
    ]


def test_paired_ratio_is_the_median_of_per_round_ratios() -> None:
    m = load()
    assert m.paired_ratio([1.0, 2.0, 9.0], [1.0, 1.0, 1.0]) == 2.0
    assert m.pct([5.0, 1.0, 3.0, 2.0, 4.0], 99) == 5.0


def test_splice_keeps_the_prose_around_the_markers() -> None:
    m = load()
    doc = f"# Performance\n\nintro\n\n{m.BEGIN}\nold table\n{m.END}\n\nnotes\n"
    assert m.splice(doc, "new table\n") == (
        f"# Performance\n\nintro\n\n{m.BEGIN}\nnew table\n{m.END}\n\nnotes\n"
    )
    assert m.splice("", "t") == f"{m.BEGIN}\nt\n{m.END}\n"
    assert m.splice("# P\n", "t") == f"# P\n\n{m.BEGIN}\nt\n{m.END}\n"


def test_oneshot_pair_compares_answers_with_ages_masked() -> None:
    # bench/oneshot_pair.py (issue 34): both checkouts' `scan --json` must say the same;
    # ages in words and the scan's own time move between two looks, nothing else may.
    import json

    spec = importlib.util.spec_from_file_location(
        "bench_oneshot_pair", REPO / "bench" / "oneshot_pair.py"
    )
    assert spec is not None and spec.loader is not None
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)

    def doc(age: str, verdict: str = "rogue", extra: int | None = None) -> str:
        jobs = [{"root_pid": 10, "verdict": verdict, "reason": f"started {age} old"}]
        if extra is not None:
            jobs.append({"root_pid": extra, "verdict": "rogue", "reason": ""})
        findings = [{"kind": "rogue-job", "root_pid": 10}]
        return json.dumps({"time": age, "duration_s": 0.3, "jobs": jobs, "findings": findings})

    assert m.compare_json(doc("4.5 s"), doc("5 s"), own={10}) == "identical (1 jobs, 1 findings)"
    differs = m.compare_json(doc("4.5 s"), doc("4.5 s", "sanctioned"), own={10})
    assert "this bench's jobs: 0 of 1 identical (differ: [10])" in differs
    moved = m.compare_json(doc("1 min"), doc("1 min", extra=99), own={10})
    assert "this bench's jobs: 1 of 1 identical, their findings the same" in moved
