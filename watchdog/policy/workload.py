"""What kind of GPU work a job is: its workload class, decided in one place.

A shared GPU box runs more than training: notebook kernels, inference servers, the
display server, monitoring tools, short CUDA probes. Each is a GPU user, and none is a
rogue *training* job; paging for them as one teaches people to ignore the pager. Every
job gets one class (:data:`~watchdog.model.WorkloadClass`) with the evidence for it, by
the first of these that holds (docs/config.md, "Workload classes"):

1. ``training``: a member runs a training launcher or script (``launcher`` evidence:
   torchrun, deepspeed, ``train*.py``...), so a notebook kernel or a server that runs
   one in its tree is training. A class never hides training.
2. ``serving``, ``interactive``, ``system``: the root runs a known program or module
   (:data:`SERVING`, :data:`INTERACTIVE`, :data:`SYSTEM`), matched on what runs (the
   program, an interpreter's script or ``-m`` module), never on an argument.
   ``system`` also covers a process NVML lists with a graphics context only.
3. ``training``: a member's environment carries a distributed launch's variables
   (``TORCHELASTIC_RUN_ID``, ``RANK`` with ``WORLD_SIZE``, ``MASTER_ADDR`` with
   ``MASTER_PORT``): a trainer run by hand under a name no launcher pattern knows.
4. ``serving``: a member listens on a socket (any GPU/CUDA process serving requests).
5. ``probe``: short-lived: it had exited when first scanned, or it is younger than
   ``workloads.probe_max_age_s`` and has only mapped a CUDA library (no GPU device open,
   nothing NVML lists).
6. ``unknown``: none of these. It may be training, so it is judged as training
   (``rogue-job``): an unrecognised GPU job is never quietly downgraded.

Names are host text a user chooses: a class only sets how loud a finding is (a non-
training class still gets its ``unsanctioned-gpu-use`` finding), never hides a job.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ..config.workloads import WorkloadSettings
from ..hosttext import code_span, command_text, plain_or_code
from ..lineage.base import is_interpreter, program_span
from ..model import GpuProcess, Job, Proc, WorkloadClass
from ..sources.procfs import ProcessTable
from ..sources.sockets import Listen, scan_listening

#: Programs (basename of what runs: the executable, or an interpreter's script) and
#: Python modules (``-m``, prefix before a dot) of each named class. A program
#: ``"vllm serve"`` matches only with that first argument.
SERVING_PROGRAMS = frozenset(
    {
        "vllm serve", "text-generation-launcher", "text-generation-server",
        "text-generation-router", "tritonserver", "torchserve", "llama-server",
        "llama-cpp-server", "ollama serve", "ollama runner", "trtllm-serve",
        "lmdeploy serve", "sglang serve", "serve run", "serve start", "mlc_llm serve",
        "tgi-server", "infinity_emb", "tabbyAPI", "koboldcpp",
    }
)  # fmt: skip
SERVING_MODULES = (
    "vllm.entrypoints", "sglang.launch_server", "sglang.srt", "text_generation_server",
    "llama_cpp.server", "lmdeploy.serve", "fastchat.serve", "tensorrt_llm.serve",
    "ray.serve", "xinference", "mlc_llm.serve", "triton_python_backend",
)  # fmt: skip
#: TorchServe's model server is a Java process: its main class names it.
SERVING_WORDS = ("org.pytorch.serve.ModelServer",)
INTERACTIVE_PROGRAMS = frozenset(
    {
        "jupyter-lab", "jupyter-notebook", "jupyter-server", "jupyter-kernel",
        "jupyter-console", "jupyter lab", "jupyter notebook", "jupyter server",
        "jupyter console", "jupyter kernel", "ipython", "ipython3", "code-server",
        "marimo", "rsession", "spyder", "voila",
    }
)  # fmt: skip
INTERACTIVE_MODULES = (
    "ipykernel_launcher", "ipykernel", "IPython", "jupyter", "jupyterlab", "notebook",
    "jupyter_server", "marimo", "spyder_kernels", "voila",
)  # fmt: skip
#: VS Code's and code-server's Node processes run from these folders.
INTERACTIVE_PATHS = ("/.vscode-server/", "/code-server/", "/.cursor-server/")
SYSTEM_PROGRAMS = frozenset(
    {
        "Xorg", "X", "Xwayland", "Xvfb", "Xvnc", "gnome-shell", "kwin_wayland", "kwin_x11",
        "sway", "weston", "mutter", "nvidia-persistenced", "nv-hostengine", "dcgmi",
        "dcgm-exporter", "nvidia-smi", "nvitop", "gpustat", "nvtop", "nvidia-powerd",
        "nv-fabricmanager", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server",
        "nvidia_gpu_exporter", "nvidia-gpu-exporter", "prometheus-node-exporter",
        "node_exporter", "glances", "nvidia-dcgm",
    }
)  # fmt: skip
SYSTEM_MODULES = ("nvitop", "gpustat", "glances", "pynvml")
#: Any ``*_exporter``/``*-exporter`` program exports metrics (it reads, it does not train).
_EXPORTER = re.compile(r"[A-Za-z0-9_.-]+[_-]exporter")
#: Variables a distributed launch sets in each worker (torchrun, torch.distributed,
#: most launchers following its convention): one of these sets is training evidence.
TRAINING_ENV: tuple[tuple[str, ...], ...] = (
    ("TORCHELASTIC_RUN_ID",),
    ("RANK", "WORLD_SIZE"),
    ("MASTER_ADDR", "MASTER_PORT"),
)
#: The evidence of ``unknown``: what was looked for, and what follows.
UNKNOWN_EVIDENCE = (
    "no training launcher or script, known program, listening socket or short life seen: "
    "judged as training"
)
# Members whose environment or sockets are read per job (the root first): bounded work.
_MAX_MEMBERS_READ = 8


@dataclass(frozen=True)
class WorkloadFacts:
    """What the scan knows beyond the jobs, for :func:`classify`.

    Attributes:
        table: The refreshed process table.
        evidence: Training PID → why it counts (``launcher``, ``nvml``, ...).
        gpu_processes: NVML entries matched to the table (their list kinds).
        exited: PIDs an exec event caught that had exited before this scan.
        settings: The ``workloads:`` section.
        now_s: Wall-clock now (POSIX seconds), for ages.
        listening: PIDs → listening sockets; None reads them from ``table.proc_root``.
    """

    table: ProcessTable
    evidence: Mapping[int, Collection[str]]
    gpu_processes: Sequence[GpuProcess] = ()
    exited: Collection[int] = frozenset()
    settings: WorkloadSettings = field(default_factory=WorkloadSettings)
    now_s: float | None = None
    listening: Callable[[Sequence[int]], list[Listen]] | None = None


def program_words(cmdline: Sequence[str]) -> tuple[str, str | None, tuple[str, ...]]:
    """What a command line runs, for matching by name.

    Returns:
        ``(program, module, arguments)``: the program is the basename of the executable
        or, for an interpreter, of its script; the module is what ``-m`` runs (None
        otherwise); the arguments are what follows the program (data to it).
    """
    if not cmdline:
        return "", None, ()
    span = program_span(cmdline)
    used, end = 0, 0
    for i, arg in enumerate(cmdline):
        if used >= span:
            break
        used += len(arg) + 1
        end = i + 1
    head, rest = list(cmdline[:end]), tuple(cmdline[end:])
    program = head[0].rsplit("/", 1)[-1]
    module = None
    if is_interpreter(head[0]):
        for i, arg in enumerate(head[1:], start=1):
            if arg == "-m" and i + 1 < len(head):
                module = head[i + 1]
            elif arg.startswith("-m") and len(arg) > 2 and not arg.startswith("--"):
                module = arg[2:]
        last = head[-1]
        if module is None and len(head) > 1 and not last.startswith("-"):
            program = last.rsplit("/", 1)[-1]
    return program, module, rest


def _module_in(module: str | None, names: Sequence[str]) -> str | None:
    if module is None:
        return None
    return next((n for n in names if module == n or module.startswith(n + ".")), None)


def _named(proc: Proc) -> tuple[WorkloadClass, str] | None:
    """The named class of what ``proc`` runs, with the evidence; None when unnamed."""
    program, module, args = program_words(proc.cmdline)
    exe = (proc.exe or "").removesuffix(" (deleted)")
    names = {program, exe.rsplit("/", 1)[-1]} - {""}
    with_arg = {f"{n} {args[0]}" for n in names} if args else set()
    table: tuple[tuple[WorkloadClass, frozenset[str], Sequence[str]], ...] = (
        ("serving", SERVING_PROGRAMS, SERVING_MODULES),
        ("interactive", INTERACTIVE_PROGRAMS, INTERACTIVE_MODULES),
        ("system", SYSTEM_PROGRAMS, SYSTEM_MODULES),
    )
    for cls, programs, modules in table:
        hit = _module_in(module, modules)
        if hit is not None:
            return cls, f"module {plain_or_code(module or hit, 80)}"
        for name in sorted(with_arg & programs) or sorted(names & programs):
            # A name from the product's own tables (``jupyter lab``), not host text.
            return cls, f"program {command_text([name], 80)}"
    if any(w in SERVING_WORDS for w in proc.cmdline[:12]):
        return "serving", "TorchServe model server"
    paths = (exe, proc.cmdline[0] if proc.cmdline else "")
    if any(p in path for p in INTERACTIVE_PATHS for path in paths):
        return "interactive", f"editor server {plain_or_code(program, 60)}"
    if any(_EXPORTER.fullmatch(n) for n in names):
        return "system", f"metrics exporter {plain_or_code(program, 60)}"
    return None


def _launcher_member(job: Job, facts: WorkloadFacts) -> str | None:
    """Evidence that a member runs a training launcher or script, or None."""
    for pid in job.pids:
        if "launcher" in facts.evidence.get(pid, ()):
            proc = facts.table.get(pid)
            what = command_text(proc.cmdline, 60) if proc is not None else "?"
            where = "" if pid == job.root_pid else " in its tree"
            return f"training launcher{where}: PID {pid} {code_span(what)}"
    if "launcher" in job.evidence:
        return "training launcher in its tree"
    return None


def _training_env(job: Job, facts: WorkloadFacts) -> str | None:
    """Evidence that a member was started as a distributed training worker, or None."""
    for pid in job.pids[:_MAX_MEMBERS_READ]:
        env = facts.table.environ(pid)
        if not env:
            continue
        for names in TRAINING_ENV:
            if all(n in env for n in names):
                return f"PID {pid} has {', '.join(names)} in its environment (a distributed launch)"
    return None


def _listening(job: Job, facts: WorkloadFacts) -> str | None:
    """Evidence that a member listens on a socket, or None."""
    pids = job.pids[:_MAX_MEMBERS_READ]
    if facts.listening is not None:
        found = facts.listening(pids)
    else:
        found = scan_listening(pids, facts.table.proc_root).listening
    found = [x for x in found if x.pid in job.pids]
    if not found:
        return None
    ends = ", ".join(f"{x.endpoint}/{x.proto}" for x in found[:3])
    more = f" (+{len(found) - 3} more)" if len(found) > 3 else ""
    return f"listens on {ends}{more}"


def _graphics_only(job: Job, facts: WorkloadFacts) -> str | None:
    """Evidence that NVML lists the job with graphics contexts only, or None."""
    kinds = {gp.list_kind for gp in facts.gpu_processes if gp.pid in job.pids}
    if kinds == {"graphics"}:
        return "NVML lists a graphics context only (a display server or desktop program)"
    return None


def _short_lived(job: Job, facts: WorkloadFacts) -> str | None:
    """Evidence that the job is a short-lived probe, or None."""
    if job.root_pid in facts.exited:
        return "had exited when first scanned (lived less than a scan interval)"
    # Young is not short-lived: a trainer is young too. Only one that has not touched a
    # GPU yet (a CUDA library mapped, no device open, nothing NVML lists) is taken for a
    # probe while young; once it opens a device it is judged on what it does.
    if set(job.evidence) - {"gpu-library"} or (job.gpu_memory_bytes or 0) > 0:
        return None
    started = facts.table.start_time_s(job.start_ticks)
    now = time.time() if facts.now_s is None else facts.now_s
    if started is None:
        return None
    age = now - started
    limit = facts.settings.probe_max_age_s
    if age >= limit:
        return None
    return (
        f"{max(age, 0.0):.1f} s old, a CUDA library mapped but no GPU device open "
        f"(probe_max_age_s {limit:g})"
    )


def classify(job: Job, facts: WorkloadFacts) -> tuple[WorkloadClass, list[str]]:
    """The class of one job and why (see the module docstring for the order).

    Args:
        job: A job with its members and training evidence.
        facts: What the scan knows besides (:class:`WorkloadFacts`).

    Returns:
        ``(class, evidence phrases)``; ``unknown`` says what was looked for.
    """
    why = _launcher_member(job, facts)
    if why is not None:
        return "training", [why]
    root = facts.table.get(job.root_pid) or (job.lineage[0] if job.lineage else None)
    named = _named(root) if root is not None else None
    if named is not None:
        return named[0], [named[1]]
    why = _graphics_only(job, facts)
    if why is not None:
        return "system", [why]
    why = _training_env(job, facts)
    if why is not None:
        return "training", [why]
    why = _listening(job, facts)
    if why is not None:
        return "serving", [why]
    why = _short_lived(job, facts)
    if why is not None:
        return "probe", [why]
    return "unknown", [UNKNOWN_EVIDENCE]


def with_classes(jobs: Sequence[Job], facts: WorkloadFacts) -> list[Job]:
    """Each job with its ``workload`` and ``workload_evidence`` set (:func:`classify`)."""
    out = []
    for job in jobs:
        cls, why = classify(job, facts)
        out.append(replace(job, workload=cls, workload_evidence=why))
    return out
