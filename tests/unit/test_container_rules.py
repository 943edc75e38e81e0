"""``container_image`` and ``container_image_digest`` allowlist keys."""

from __future__ import annotations

from rogue_watchdog.config import parse_config
from rogue_watchdog.model import Job, origin_from_json
from rogue_watchdog.policy.allowlist import judge

DIGEST = "sha256:" + "ab" * 32
CONFIG = f"""
sanctioned:
  - name: pinned
    cmdline: "*train.py"
    origin: {{container_image: "localhost/trainer:1", container_image_digest: "{DIGEST}"}}
"""


def _judge(fields: dict[str, str | None], kind: str = "container") -> Job:
    job = Job(
        root_pid=9, pids=[9], user="root", cmdline=("python3", "train.py"), start_ticks=1,
        gpu_memory_bytes=None, gpu_uuids=[], lineage=[],
        origin=origin_from_json({"kind": kind, **fields}),
    )  # fmt: skip
    (job,) = judge([job], parse_config(CONFIG, "c.yaml"))
    return job


def test_name_and_digest_both_pinned() -> None:
    assert _judge({"image": "localhost/trainer:1", "image_id": DIGEST}).verdict == "sanctioned"


def test_same_name_other_digest_is_rogue() -> None:
    job = _judge({"image": "localhost/trainer:1", "image_id": "sha256:" + "cd" * 32})
    assert job.verdict == "rogue"
    assert job.reason == (
        "not sanctioned: rule 'pinned' matches the command line but "
        f"origin must be container image digest {DIGEST!r}"
    )


def test_unknown_digest_is_not_a_match() -> None:
    assert _judge({"image": "localhost/trainer:1", "image_id": None}).verdict == "rogue"
    assert _judge({"image": "localhost/trainer:1", "image_id": DIGEST}, "kubernetes").verdict == (
        "rogue"
    )
