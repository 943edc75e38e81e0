"""Workload classes (issue 35, cases 2, 3 and 9): a notebook kernel, an inference server
and a display server are GPU users, not rogue training jobs; exemptions fit how shared
hosts are run; the GPU memory split has an ``ignored`` holder.

Real processes the test started hold GPU memory through the fake ``libnvidia-ml.so.1``
(tests/fakenvml); ``python -m rogue_watchdog scan --json`` runs as a user would run it. The host
may run other GPU-shaped processes: only the findings of this test's PIDs are compared.
"""

from __future__ import annotations

import json
import pwd
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Spawned, need_program, run_cli
from tests.fakenvml.fixtures import fake_nvml, library_path

GIB = 1024**3
# Listens on 127.0.0.1 (as a kernel's ZeroMQ ports and a local API server do) and waits.
SERVE = "import socket, time\ns = socket.socket()\ns.bind(('127.0.0.1', 0))\ns.listen()\n"
SERVE += "time.sleep(120)\n"
KERNEL_RUNS_TRAINING = (
    "import socket, subprocess, sys, time\n"
    "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
    "subprocess.Popen([sys.executable, sys.argv[-1]])\n"
    "time.sleep(120)\n"
)


def modules(root: Path, kernel_code: str = SERVE) -> Path:
    """``ipykernel_launcher`` and ``vllm.entrypoints.openai.api_server`` stand-ins that
    listen on 127.0.0.1, importable from ``root``."""
    (root / "ipykernel_launcher.py").write_text(kernel_code)
    pkg = root / "vllm" / "entrypoints" / "openai"
    pkg.mkdir(parents=True)
    for d in (root / "vllm", root / "vllm" / "entrypoints", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "api_server.py").write_text(SERVE)
    return root


def start_busy_box(spawned: Spawned, tmp_path: Path, kernel_code: str = SERVE) -> dict[str, int]:
    """A notebook kernel, a vLLM-shaped server and an Xorg outside /usr/*/Xorg."""
    need_program("gcc", "sleep")
    (tmp_path / "py").mkdir()
    lib = modules(tmp_path / "py", kernel_code)
    env = {"PYTHONPATH": str(lib), "PATH": "/usr/bin:/bin"}
    kernel_json = tmp_path / "runtime" / "kernel-1.json"
    train = tmp_path / "train_in_notebook.py"
    train.write_text("import time\ntime.sleep(120)\n")
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", str(kernel_json)]
    if kernel_code is not SERVE:
        argv.append(str(train))
    kernel = spawned.start(argv, env=env, cwd=tmp_path).pid
    server = spawned.start(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--port", "8000"],
        env=env,
        cwd=tmp_path,
    ).pid
    xorg = tmp_path / "opt" / "X11" / "bin" / "Xorg"
    xorg.parent.mkdir(parents=True)
    shutil.copy(shutil.which("sleep") or "/bin/sleep", xorg)
    display = spawned.start([str(xorg), "120"]).pid
    time.sleep(0.5)  # the modules imported, the sockets bound
    return {"kernel": kernel, "server": server, "display": display}


def config(tmp_path: Path, pids: dict[str, int], extra: str = "") -> Path:
    procs = [
        {"pid": pids["kernel"], "mem": 2 * GIB},
        {"pid": pids["server"], "mem": 20 * GIB},
        {"pid": pids["display"], "mem": GIB // 4, "kind": "graphics"},
    ]
    lib = fake_nvml(
        tmp_path,
        {
            "driver": "550.54.15",
            "devices": [
                {
                    "name": "NVIDIA H100",
                    "uuid": "GPU-0",
                    "total": 80 * GIB,
                    "used": 22 * GIB + GIB // 4,
                    "processes": procs,
                }
            ],
        },
    )
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        f"nvml: {{library: '{library_path(lib)}'}}\n"
        f"training: {{device_glob: '{tmp_path}/nodev[0-9]*'}}\n"
        "sanctioned:\n"
        "  - name: pipeline\n"
        "    cmdline: '* /opt/pipeline/train.py*'\n"
        "    origin: {systemd_unit: train-pipeline.service}\n" + extra
    )
    return cfg


def scan_json(cfg: Path) -> dict[str, Any]:
    done = run_cli("scan", "--json", "--config", str(cfg))
    assert done.returncode in (0, 1), done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def findings_of(doc: dict[str, Any], pids: dict[str, int]) -> list[tuple[str, str, str]]:
    """``(process, kind, severity)`` of each finding about this test's processes."""
    name = {pid: n for n, pid in pids.items()}
    return sorted(
        (name[f["root_pid"]], f["kind"], f["severity"])
        for f in doc["findings"]
        if f.get("root_pid") in name
    )


def jobs_of(doc: dict[str, Any], pids: dict[str, int]) -> dict[str, tuple[str, str | None]]:
    """Process → ``(verdict, workload class)`` of this test's jobs."""
    name = {pid: n for n, pid in pids.items()}
    return {
        name[j["root_pid"]]: (j["verdict"], j.get("workload"))
        for j in doc["jobs"]
        if j["root_pid"] in name
    }


def test_case2_notebook_server_and_display_are_not_rogue_training_jobs(
    spawned: Spawned, tmp_path: Path
) -> None:
    """Case 2. Before (4ec0a01): each was ``rogue-job`` high, the kernel and the server
    also ``rogue-service`` high (they listen on 127.0.0.1), the server's message saying it
    "started its own training run"."""
    pids = start_busy_box(spawned, tmp_path)
    doc = scan_json(config(tmp_path, pids))
    assert findings_of(doc, pids) == [
        ("display", "unsanctioned-gpu-use", "warning"),
        ("kernel", "unsanctioned-gpu-use", "warning"),
        ("server", "unsanctioned-gpu-use", "warning"),
    ]
    assert jobs_of(doc, pids) == {
        "display": ("rogue", "system"),
        "kernel": ("rogue", "interactive"),
        "server": ("rogue", "serving"),
    }
    server = next(f for f in doc["findings"] if f.get("root_pid") == pids["server"])
    assert server["message"].startswith(
        f"unsanctioned GPU use: inference server PID {pids['server']} on GPU 0 (20.0 GiB), "
    )
    assert "training run" not in server["message"]
    assert (
        "class serving (module vllm.entrypoints.openai.api_server), not training"
        in (server["message"])
    )
    assert server["details"]["workload"] == "serving"
    # What exempts it, by user and class, is in the message.
    assert server["message"].endswith("ignore: [{name: root-serving, user: root, class: serving}]")


def test_case2_a_single_owner_box_pages_for_every_class(spawned: Spawned, tmp_path: Path) -> None:
    pids = start_busy_box(spawned, tmp_path)
    doc = scan_json(config(tmp_path, pids, "workloads: {severity: high}\n"))
    assert findings_of(doc, pids) == [
        ("display", "unsanctioned-gpu-use", "high"),
        ("kernel", "unsanctioned-gpu-use", "high"),
        ("server", "unsanctioned-gpu-use", "high"),
    ]


def test_a_class_never_hides_training(spawned: Spawned, tmp_path: Path) -> None:
    """A notebook kernel that runs a training script in its tree is a rogue training
    job (and, listening, a rogue service), exemptions by class notwithstanding."""
    pids = start_busy_box(spawned, tmp_path, KERNEL_RUNS_TRAINING)
    exempt = "ignore: [{name: notebooks, user: root, class: interactive}]\n"
    doc = scan_json(config(tmp_path, pids, exempt))
    assert jobs_of(doc, pids)["kernel"] == ("rogue", "training")
    assert [f[1:] for f in findings_of(doc, pids) if f[0] == "kernel"] == [
        ("rogue-job", "high"),
        ("rogue-service", "high"),
    ]
    job = next(j for j in doc["jobs"] if j["root_pid"] == pids["kernel"])
    assert job["workload_evidence"][0].startswith("training launcher in its tree: PID ")


def test_case3_exemptions_by_user_and_class_keep_the_defaults(
    spawned: Spawned, tmp_path: Path
) -> None:
    """Case 3. Before (4ec0a01): ``ignore`` took only exe or cmdline globs
    (``unknown key 'user'``), and giving the list replaced the shipped defaults."""
    pids = start_busy_box(spawned, tmp_path)
    exempt = (
        "ignore:\n"
        "  - {name: notebooks, user: root, class: interactive}\n"
        "  - {name: inference, group: root, class: [serving]}\n"
    )
    cfg = config(tmp_path, pids, exempt)
    checked = run_cli("check-config", str(cfg))
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.splitlines()[1:] == [
        "ignore (the shipped defaults kept; 'ignore_defaults: false' drops them):",
        "  'xorg' (exe /usr/*/Xorg) (default)",
        "  'nvidia-persistenced' (exe /usr/*/nvidia-persistenced) (default)",
        "  'dcgm' (exe /usr/*/nv-hostengine) (default)",
        "  'dcgm-exporter' (exe /usr/*/dcgm-exporter) (default)",
        "  'nvidia-smi' (exe /usr/*/nvidia-smi) (default)",
        "  'nvtop' (exe /usr/*/nvtop) (default)",
        "  'notebooks' (user root; class interactive)",
        "  'inference' (group root; class serving)",
        "unsanctioned-gpu-use severity: serving warning, interactive warning, "
        "system warning, probe warning",
    ]
    doc = scan_json(cfg)
    assert jobs_of(doc, pids) == {
        "display": ("rogue", "system"),
        "kernel": ("ignored", "interactive"),
        "server": ("ignored", "serving"),
    }
    assert findings_of(doc, pids) == [("display", "unsanctioned-gpu-use", "warning")]
    # Case 9 on the same GPU: the ignored holders are a holder of their own.
    done = run_cli("scan", "--config", str(cfg), env={"COLUMNS": "300"})
    gpu = next(line for line in done.stdout.splitlines() if line.startswith("  GPU 0 "))
    assert "unsanctioned 256.0 MiB, ignored 22.0 GiB, not attributable 0 B" in gpu


def test_case9_gpu_split_has_an_ignored_holder() -> None:
    """Case 9. Before (4ec0a01): ``sanctioned 3.0 GiB, unsanctioned 0 B, not attributable
    1.0 GiB`` (the ignored 1 GiB counted as sanctioned)."""
    from rogue_watchdog.render import gpu_lines

    held = [("sanctioned", 2 * GIB), ("ignored", GIB)]
    (line,) = gpu_lines("0", "NVIDIA H100", 4 * GIB, 80 * GIB, "GPU-0", held)
    assert line == (
        "  GPU 0  NVIDIA H100  4.0 GiB used of 80.0 GiB: sanctioned 2.0 GiB, unsanctioned 0 B,"
        " ignored 1.0 GiB, not attributable 1.0 GiB  GPU-0"
    )
    # No ignored holder on the GPU: the split reads as it always did (README example).
    (plain,) = gpu_lines("3", "NVIDIA H200", 10 * GIB, 140 * GIB, "GPU-3", [("rogue", 4 * GIB)])
    assert plain.endswith("sanctioned 0 B, unsanctioned 4.0 GiB, not attributable 6.0 GiB  GPU-3")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "ignore: [{name: x, class: training}]\n",
            "c:1: ignore[0].class: an ignore entry never exempts training",
        ),
        (
            "ignore: [{name: x, class: notebook}]\n",
            "c:1: ignore[0].class: must be a workload class: training, serving, interactive,",
        ),
        ("ignore: [{name: x, origin_kind: tmux}]\n", "c:1: ignore[0].origin_kind: must be an"),
        ("workloads: {severity: {training: info}}\n", "c:1: workloads.severity.training: "),
        ("workloads: {severity: loud}\n", "c:1: workloads.severity: must be one of info,"),
        ("ignore: [{name: x}]\n", "c:1: ignore[0]: needs exe, cmdline, user, group,"),
    ],
)
def test_exemption_and_class_keys_are_checked(text: str, error: str) -> None:
    from rogue_watchdog.config import ConfigError, parse_config

    with pytest.raises(ConfigError) as exc:
        parse_config(text, "c")
    assert str(exc.value).startswith(error), str(exc.value)


def test_ignore_defaults_and_a_user_alone_is_a_warning() -> None:
    from rogue_watchdog.config import parse_config

    dropped = parse_config("ignore_defaults: false\nignore: [{name: x, exe: /opt/X}]\n", "c")
    assert [e.name for e in dropped.ignore] == ["x"]
    assert parse_config("ignore_defaults: false\n", "c").ignore == ()
    replaced = parse_config("ignore: [{name: xorg, exe: /opt/*/Xorg}]\n", "c").ignore
    assert [(e.name, e.exe) for e in replaced][-1] == ("xorg", "/opt/*/Xorg")
    assert len(replaced) == 6
    warned = parse_config("ignore: [{name: all-root, user: root}]\n", "c").warnings
    assert [str(w) for w in warned] == [
        "c:1: ignore[0]: ignores every GPU job of user 'root', training included; add "
        "'class:' (serving, interactive, system, probe) to exempt only what is not training"
    ]


def _job(workload: str, kind: str = "shell", user: str = "root") -> Any:
    from rogue_watchdog.model import Job, OrphanOrigin, Proc, ShellOrigin

    uid = pwd.getpwnam(user).pw_uid
    root = Proc(pid=4242, ppid=1, start_ticks=7, state="S", comm="python3", uid=uid, user=user)
    origin = ShellOrigin(session="tmux session 'lab'") if kind == "shell" else OrphanOrigin()
    return Job(
        root_pid=4242,
        pids=[4242],
        user=user,
        cmdline=("python3",),
        start_ticks=7,
        gpu_memory_bytes=None,
        gpu_uuids=[],
        lineage=[root],
        origin=origin,
        workload=workload,  # type: ignore[arg-type]
    )


def test_ignore_by_origin_kind_group_and_class_on_jobs() -> None:
    from rogue_watchdog.config import parse_config
    from rogue_watchdog.policy.jobs import ignore_match_job

    c = parse_config(
        "ignore:\n"
        "  - {name: tmux-probes, origin_kind: shell, class: probe}\n"
        "  - {name: root-group-notebooks, group: root, class: [interactive, serving]}\n",
        "c",
    )
    assert ignore_match_job(_job("probe"), c.ignore).name == "tmux-probes"  # type: ignore[union-attr]
    assert ignore_match_job(_job("probe", "orphan"), c.ignore) is None
    assert ignore_match_job(_job("serving", "orphan"), c.ignore).name == "root-group-notebooks"  # type: ignore[union-attr]
    assert ignore_match_job(_job("training"), c.ignore) is None
    assert ignore_match_job(_job("unknown"), c.ignore) is None
    assert ignore_match_job(_job("serving", user="nobody"), c.ignore) is None


@pytest.mark.parametrize(
    ("argv", "exe", "cls", "evidence"),
    [
        (["python3", "-m", "vllm.entrypoints.openai.api_server"], None, "serving", "module"),
        (["/usr/bin/python3", "/usr/local/bin/vllm", "serve", "m"], None, "serving", "program"),
        (["text-generation-launcher", "--model-id", "x"], None, "serving", "program"),
        (["/opt/llama.cpp/llama-server", "-m", "x.gguf"], None, "serving", "program"),
        (["python3", "-m", "sglang.launch_server"], None, "serving", "module"),
        (["java", "-cp", "x", "org.pytorch.serve.ModelServer"], None, "serving", "TorchServe"),
        (["python3", "-m", "ipykernel_launcher", "-f", "k.json"], None, "interactive", "module"),
        (["/usr/bin/python3", "/usr/bin/jupyter-lab"], None, "interactive", "program"),
        (["/home/a/.vscode-server/bin/x/node", "y"], None, "interactive", "editor"),
        (["/opt/X11/bin/Xorg", ":0"], "/opt/X11/bin/Xorg", "system", "program"),
        (["/usr/bin/python3", "/usr/local/bin/nvitop"], None, "system", "program"),
        (["/usr/bin/dcgm-exporter"], "/usr/bin/dcgm-exporter", "system", "program"),
        (["/opt/x/nvidia_gpu_exporter"], None, "system", "program"),
        (["/opt/x/my-exporter"], None, "system", "metrics exporter"),
    ],
)
def test_named_classes(argv: list[str], exe: str | None, cls: str, evidence: str) -> None:
    from rogue_watchdog.model import Proc
    from rogue_watchdog.policy.workload import _named

    proc = Proc(pid=9, ppid=1, start_ticks=1, state="S", comm="x", exe=exe, cmdline=tuple(argv))
    got = _named(proc)
    assert got is not None and got[0] == cls and got[1].startswith(evidence), got


@pytest.mark.parametrize(
    "argv",
    [
        ["vim", "vllm/entrypoints/openai/api_server.py"],
        ["tail", "-f", "Xorg.0.log"],
        ["python3", "serve.py"],
        ["python3", "-c", "import vllm"],
        ["grep", "-r", "ipykernel_launcher", "."],
    ],
)
def test_only_what_runs_names_a_class(argv: list[str]) -> None:
    from rogue_watchdog.model import Proc
    from rogue_watchdog.policy.workload import _named

    proc = Proc(pid=9, ppid=1, start_ticks=1, state="S", comm="x", cmdline=tuple(argv))
    assert _named(proc) is None


def test_probe_training_env_and_listening_classes(spawned: Spawned, tmp_path: Path) -> None:
    """The classes decided from what a process does: a distributed worker's environment
    is training; a GPU process listening on a socket serves; a young one holding no GPU
    memory, or one already exited when first scanned, is a probe; else unknown."""
    from rogue_watchdog.model import Job
    from rogue_watchdog.policy.workload import WorkloadFacts, classify
    from rogue_watchdog.sources.procfs import ProcessTable

    sleep = "import time\ntime.sleep(120)\n"
    worker = spawned.start(
        [sys.executable, "-c", sleep], env={"RANK": "0", "WORLD_SIZE": "2", "PATH": "/bin"}
    ).pid
    server = spawned.start([sys.executable, "-c", SERVE]).pid
    plain = spawned.start([sys.executable, "-c", sleep]).pid
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not _listens(server):
        time.sleep(0.05)
    table = ProcessTable("/proc")
    table.refresh()

    def job(pid: int, memory: int | None = None, evidence: tuple[str, ...] = ()) -> Job:
        proc = table.procs[pid]
        return Job(
            pid, [pid], proc.user, proc.cmdline, proc.start_ticks, memory, [], [proc],
            evidence=list(evidence),
        )  # fmt: skip

    facts = WorkloadFacts(table=table, evidence={})
    assert classify(job(worker), facts)[0] == "training"
    assert classify(job(server), facts) == ("serving", [_listening_text(server)])
    cls, why = classify(job(plain, None, ("gpu-library",)), facts)
    assert cls == "probe"
    assert why[0].endswith(
        " s old, a CUDA library mapped but no GPU device open (probe_max_age_s 10)"
    )
    # Young is not short-lived: one holding a device or GPU memory is judged as training.
    assert classify(job(plain, GIB), facts)[0] == "unknown"
    assert classify(job(plain, None, ("device-fd", "gpu-library")), facts)[0] == "unknown"
    later = WorkloadFacts(table=table, evidence={}, now_s=time.time() + 60)
    assert classify(job(plain), later)[0] == "unknown"
    gone = WorkloadFacts(table=table, evidence={}, exited={plain}, now_s=time.time() + 60)
    assert classify(job(plain, GIB), gone) == (
        "probe",
        ["had exited when first scanned (lived less than a scan interval)"],
    )


def _listens(pid: int) -> bool:
    from rogue_watchdog.sources.sockets import scan_listening

    return bool(scan_listening([pid]).listening)


def _listening_text(pid: int) -> str:
    from rogue_watchdog.sources.sockets import scan_listening

    (x,) = scan_listening([pid]).listening
    return f"listens on {x.endpoint}/{x.proto}"
