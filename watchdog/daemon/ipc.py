"""The status socket: a unix stream socket answering one JSON request per connection.

Protocol (docs/status.md): the client sends one line of JSON, ``{"request": "status"}``,
and reads one line of JSON back, the status document (or ``{"error": "..."}``), then the
server closes the connection. The socket file is mode 0660, owned by root and
``daemon.socket_group``: the kernel refuses ``connect()`` to anyone else with EACCES
(unix(7): connecting to a stream socket needs write permission on the socket file).
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import pwd
import select
import socket
import stat
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..logs import get_logger

# structlog is imported on the first event: only the server logs, and the client
# (``rogue-watchdog status``) must start fast.
log = get_logger()

SOCKET_MODE = 0o660
MAX_REQUEST_BYTES = 64 * 1024
# A status document of thousands of jobs is a few MiB; a reply larger than this is no
# daemon's (a client buffers it whole).
MAX_REPLY_BYTES = 64 * 1024 * 1024
CLIENT_TIMEOUT_S = 2.0
# Connections served at once; further ones are answered "busy" and closed at once, so
# a flood of idle clients cannot block the accept loop or grow threads without bound.
MAX_CLIENTS = 8
# Pending connections the kernel queues before ``connect()`` fails with EAGAIN: a burst of
# ``status`` calls waits in the queue instead of being refused (capped by
# net.core.somaxconn, listen(2)).
BACKLOG = socket.SOMAXCONN
BUSY_REPLY = b'{"error": "busy: too many status clients at once"}\n'


class SocketInUseError(RuntimeError):
    """Another process answers on the socket path (a second daemon)."""


class SocketPathTakenError(OSError):
    """The socket path is taken by something that is not a socket this daemon may
    replace (a regular file, a symlink, a directory): the daemon refuses to start
    rather than run without a socket while ``status`` says "not running" (issue 32,
    case 6)."""


def socket_path_taken(path: str) -> str | None:
    """Why ``path`` cannot become the status socket, or None when it is free or a
    socket file (a stale one is replaced at bind; a live one is refused then).

    A symlink is never followed: through one, ``status`` would reach whatever it
    points at, another daemon's socket included.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path} cannot be examined: {exc.strerror or exc}"
    if stat.S_ISSOCK(st.st_mode):
        return None
    what = (
        "a symlink"
        if stat.S_ISLNK(st.st_mode)
        else "a directory"
        if stat.S_ISDIR(st.st_mode)
        else "a regular file"
        if stat.S_ISREG(st.st_mode)
        else "not a socket"
    )
    return (
        f"the status socket path {path} is taken by {what}, not a socket of this daemon; "
        "refusing to replace it: remove it or set daemon.socket"
    )


class StatusServer:
    """Daemon Worker serving ``provider()`` (normally ``build_status(daemon)``) on a unix socket.

    The server thread only accepts; each connection is answered in its own short-lived
    thread (at most ``MAX_CLIENTS`` at once) under one deadline for the whole request, so
    a client that stalls (or trickles a byte at a time) cannot hold its connection longer
    than ``client_timeout_s`` nor delay anyone else. Any exception while answering one
    request becomes an ``{"error": ...}`` reply; if the accept thread itself ever dies,
    the reason is recorded in ``degraded["status-socket"]``.

    Args:
        path: Socket path (``daemon.socket``); its directory is created (0755) if missing.
        provider: Returns the JSON-ready status document.
        group: Group name (or numeric gid) given access (``daemon.socket_group``); None
            keeps the creating process's group.
        client_timeout_s: Deadline in seconds for a whole connection (read + answer).
        degraded: The daemon's ``degraded`` dict, told if the server thread dies.
    """

    name = "status-socket"

    def __init__(
        self,
        path: str,
        provider: Callable[[], dict[str, Any]],
        *,
        group: str | None = None,
        client_timeout_s: float = CLIENT_TIMEOUT_S,
        degraded: dict[str, str] | None = None,
    ) -> None:
        self.path = path
        self.degraded = degraded
        self._clients = threading.BoundedSemaphore(MAX_CLIENTS)
        self.provider = provider
        self.group = group
        self.client_timeout_s = client_timeout_s
        self._sock: socket.socket | None = None
        self._inode: tuple[int, int] | None = None
        self._wake_r, self._wake_w = -1, -1
        self._thread: threading.Thread | None = None

    # -- Worker ------------------------------------------------------------------------

    def start(self) -> None:
        """Bind the socket and start serving.

        Raises:
            SocketInUseError: Another process is listening on ``path``.
            OSError: The directory or socket cannot be created, or ``group`` is unknown
                (KeyError is turned into OSError).
        """
        if self._thread is not None:
            return  # already serving (started early by ``run`` to fail fast)
        if len(os.fsencode(self.path)) >= 108:  # sun_path is 108 bytes (unix(7))
            raise OSError(f"socket path too long for a unix socket (max 107 bytes): {self.path}")
        created = _mkdirs(Path(self.path).parent)
        try:
            self._bind_and_listen()
        except BaseException:
            for d in created:  # leave no directory behind that only this attempt made
                with contextlib.suppress(OSError):
                    d.rmdir()
            raise
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC)
        self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
        self._thread.start()
        log.info("status-socket-listening", path=self.path, mode=oct(SOCKET_MODE), group=self.group)

    def _bind_and_listen(self) -> None:
        self._remove_stale()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        old_umask = os.umask(0o177)  # never world-accessible, not even for an instant
        try:
            sock.bind(self.path)
        except OSError:
            sock.close()
            raise
        finally:
            os.umask(old_umask)
        try:
            gid = _gid(self.group) if self.group is not None else -1
            os.chown(self.path, -1, gid)
            os.chmod(self.path, SOCKET_MODE)
            sock.listen(BACKLOG)
            st = os.stat(self.path)
        except Exception as exc:  # KeyError/OverflowError from the group too
            sock.close()
            with contextlib.suppress(OSError):
                os.unlink(self.path)  # never leave the half-made socket file behind
            if isinstance(exc, KeyError):
                raise OSError(f"daemon.socket_group: unknown group {self.group!r}") from None
            if isinstance(exc, OSError):
                raise
            raise OSError(f"socket setup failed: {type(exc).__name__}: {exc}") from None
        self._inode = (st.st_dev, st.st_ino)
        self._sock = sock

    def stop(self) -> None:
        """Stop serving, close the socket and remove its file (only if it is still ours)."""
        if self._thread is not None:
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"x")
            self._thread.join(timeout=5)
            self._thread = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._wake_r = self._wake_w = -1
        try:
            st = os.stat(self.path)
            if (st.st_dev, st.st_ino) == self._inode:
                os.unlink(self.path)
        except OSError:
            pass
        self._inode = None

    # -- internals ---------------------------------------------------------------------

    def _remove_stale(self) -> None:
        """Unlink a leftover socket file from a crashed daemon; refuse a live one."""
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise SocketPathTakenError(socket_path_taken(self.path) or self.path)
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        probe.settimeout(1.0)
        try:
            probe.connect(self.path)
        except OSError:
            os.unlink(self.path)  # nobody listening: stale
            log.info("status-socket-stale-removed", path=self.path)
            return
        finally:
            probe.close()
        raise SocketInUseError(f"another process is listening on {self.path}")

    def _serve(self) -> None:
        try:
            self._accept_loop()
        except BaseException as exc:  # record why the socket went deaf
            error = f"server thread died: {type(exc).__name__}: {exc}"
            log.error("component-degraded", component="status-socket", error=error)
            if self.degraded is not None:
                self.degraded["status-socket"] = error

    def _accept_loop(self) -> None:
        assert self._sock is not None
        listen_fd = self._sock.fileno()
        while True:
            try:
                ready, _, _ = select.select([listen_fd, self._wake_r], [], [])
            except OSError:
                return
            if self._wake_r in ready:
                return
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            if not self._clients.acquire(blocking=False):
                _busy(conn)
                continue
            try:
                threading.Thread(
                    target=self._client, args=(conn,), name="status-client", daemon=True
                ).start()
            except RuntimeError:  # cannot start a thread: answer nobody, keep accepting
                self._clients.release()
                conn.close()

    def _client(self, conn: socket.socket) -> None:
        try:
            with conn, contextlib.suppress(OSError):  # the client went away or timed out
                self._answer(conn)
        finally:
            self._clients.release()

    def _answer(self, conn: socket.socket) -> None:
        # One deadline for the whole request: a per-recv timeout would let a client
        # sending one byte per second hold the connection indefinitely.
        deadline = time.monotonic() + self.client_timeout_s
        data = b""
        while b"\n" not in data and len(data) <= MAX_REQUEST_BYTES:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            conn.settimeout(left)
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
        try:
            reply = self._reply(data.split(b"\n", 1)[0])
            text = json.dumps(reply, default=str)
        except Exception as exc:  # one bad request must not stop the server
            text = json.dumps({"error": f"bad request: {type(exc).__name__}"})
        conn.settimeout(max(0.1, deadline - time.monotonic()))
        conn.sendall(text.encode() + b"\n")

    def _reply(self, line: bytes) -> dict[str, Any]:
        try:
            request = json.loads(line or b"{}")
        except ValueError:
            return {"error": "request is not JSON"}
        except RecursionError:  # b"[[[[…": nested too deep for the parser
            return {"error": "request is nested too deeply"}
        if not isinstance(request, dict):
            return {"error": "request must be a JSON object"}
        kind = request.get("request", "status")
        if kind != "status":
            return {"error": f"unknown request {kind!r}; known: status"}
        try:
            return self.provider()
        except Exception as exc:  # a status bug must not take the socket down
            log.error("status-failed", error=f"{type(exc).__name__}: {exc}")
            return {"error": f"status failed: {type(exc).__name__}: {exc}"}


def _drain(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while conn.recv(MAX_REQUEST_BYTES):
            pass


def _busy(conn: socket.socket) -> None:
    """Answer "busy" without ever resetting the connection: a unix socket closed with
    unread data makes the peer's next read fail with ECONNRESET (unix(7)), so the
    request already sent is read (without waiting) before the answer, and the write side
    is shut first; the client retries (:func:`query_status`)."""
    with conn, contextlib.suppress(OSError):
        conn.setblocking(False)
        _drain(conn)
        conn.send(BUSY_REPLY)
        conn.shutdown(socket.SHUT_WR)
        _drain(conn)


def socket_in_use(path: str) -> bool:
    """True when a process answers ``connect()`` on the unix socket ``path``.

    Used before detaching, so ``run --daemonize`` can refuse at the terminal.
    """
    try:
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            return False
    except OSError:
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except OSError:
        return False
    finally:
        probe.close()
    return True


def _mkdirs(directory: Path) -> list[Path]:
    """Create ``directory`` (0755) and missing parents; return those created, deepest first."""
    missing: list[Path] = []
    d = directory
    while not d.exists() and d != d.parent:
        missing.append(d)
        d = d.parent
    directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    return missing


def _gid(group: str) -> int:
    if group.isdigit():
        return int(group)
    return grp.getgrnam(group).gr_gid


class StatusError(Exception):
    """Querying the status socket failed.

    Attributes:
        exit_code: 3 not running (no socket, refused), 4 unknown (permission, timeout,
            garbage).
    """

    def __init__(self, exit_code: int, message: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def query_status(path: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """Ask the daemon at ``path`` for its status document.

    A daemon that answers "busy" (all its status slots taken, e.g. by idle clients) or
    whose connection queue is full is asked again, with growing pauses, until
    ``timeout_s`` has passed: a burst of ``status`` calls waits instead of failing.

    Args:
        path: The status socket.
        timeout_s: Deadline in seconds for the whole query (connects, retries, answer).

    Returns:
        The status document.

    Raises:
        StatusError: exit_code 3 when no daemon is running (socket file absent, or
            connection refused: a stale file), 4 when its state is unknown (permission
            denied, timeout, still busy at the deadline, a reply that is not a status
            document).
    """
    deadline = time.monotonic() + timeout_s
    pause = 0.02
    while True:
        data = _ask(path, deadline, timeout_s)
        busy = data is None or data.startswith(BUSY_REPLY.rstrip())
        if not busy:
            break
        left = deadline - time.monotonic()
        if left <= pause:
            raise StatusError(4, f"the daemon stayed busy for {timeout_s:g}s on {path}")
        time.sleep(pause)
        pause = min(pause * 2, 0.5)
    assert data is not None
    try:
        doc = json.loads(data)
    except ValueError:
        raise StatusError(4, f"garbage reply from {path}: {data[:80]!r}") from None
    if not isinstance(doc, dict):
        raise StatusError(4, f"garbage reply from {path}: not a JSON object")
    if "error" in doc:
        raise StatusError(4, f"the daemon answered with an error: {doc['error']}")
    if doc.get("schema_version") is None or "findings" not in doc:
        raise StatusError(4, f"unexpected reply from {path}: not a status document")
    problem = _shape_problem(doc)
    if problem is not None:
        raise StatusError(4, f"unexpected reply from {path}: {problem}")
    return doc


def _shape_problem(doc: dict[str, Any]) -> str | None:
    """What makes a reply unusable as a status document (docs/status.md): the lists every
    reader walks must be lists of objects. None when they are."""
    for key in ("findings", "jobs", "gpus"):
        if not _objects(doc.get(key)):
            return f"{key} is not a list of objects"
    if not all(_objects(job.get("gpus")) for job in doc.get("jobs") or []):
        return "a job's gpus is not a list of objects"
    return None


def _objects(value: object) -> bool:
    """True for a JSON list of objects (absent or null counts as empty)."""
    items = value or []
    return isinstance(items, list) and all(isinstance(i, dict) for i in items)


def _ask(path: str, deadline: float, timeout_s: float) -> bytes | None:
    """One connection: the reply's bytes, or None when the connection queue was full."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    sock.settimeout(max(0.01, deadline - time.monotonic()))
    try:
        try:
            sock.connect(path)
        except FileNotFoundError:
            raise StatusError(3, f"not running: no status socket at {path}") from None
        except ConnectionRefusedError:
            if not _is_socket(path):
                raise StatusError(
                    3, f"not running: {path} is not a socket (check --socket / daemon.socket)"
                ) from None
            raise StatusError(
                3, f"not running: nothing listens on {path} (a stale socket file)"
            ) from None
        except PermissionError:
            raise StatusError(
                4, f"permission denied connecting to {path}{_perm_hint(path)}"
            ) from None
        except BlockingIOError:  # EAGAIN: the listen queue is full; ask again
            return None
        except TimeoutError:
            raise StatusError(4, f"timed out connecting to {path}") from None
        except OSError as exc:
            raise StatusError(4, f"cannot connect to {path}: {exc.strerror or exc}") from None
        _check_answerer(sock, path)
        parts: list[bytes] = []
        size = 0
        try:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                # The server may have answered "busy" and closed before reading this.
                sock.sendall(b'{"request": "status"}\n')
            while True:
                # The deadline holds for the whole answer, not each read: a peer that
                # drips a byte at a time must not hold a command forever.
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                sock.settimeout(left)
                chunk = sock.recv(65536)
                if not chunk:
                    break
                parts.append(chunk)
                size += len(chunk)
                if size > MAX_REPLY_BYTES:
                    raise StatusError(
                        4, f"the reply from {path} is larger than {MAX_REPLY_BYTES} bytes"
                    )
        except TimeoutError:
            raise StatusError(
                4, f"the daemon did not answer within {timeout_s:g}s on {path}"
            ) from None
        except ConnectionResetError:
            if not parts:
                raise StatusError(4, f"reading from {path} failed: connection reset") from None
        except OSError as exc:
            raise StatusError(4, f"reading from {path} failed: {exc.strerror or exc}") from None
    finally:
        sock.close()
    return b"".join(parts)


def _check_answerer(sock: socket.socket, path: str) -> None:
    """Refuse a status socket that a process of another user listens on.

    Commands without ``--config`` take their configuration, protect list and state
    directory from the answer, and ``find_daemon`` finds a daemon by its command line,
    which any user can give a process of theirs: root must not judge or act under what
    another user's process says. Only root's and this process's user's are believed, as
    :func:`~watchdog.config.trust_errors` trusts files (unix(7) ``SO_PEERCRED``: the
    listener's credentials when it called ``listen(2)``).

    Raises:
        StatusError: exit_code 4, naming the listener's uid and PID.
    """
    size = struct.calcsize("3i")
    try:
        pid, uid, _ = struct.unpack(
            "3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, size)
        )
    except OSError as exc:
        raise StatusError(4, f"cannot tell who listens on {path}: {exc.strerror or exc}") from None
    if uid not in (0, os.geteuid()):
        raise StatusError(
            4,
            f"{path} is answered by PID {pid} of uid {uid}, neither root nor this user: "
            "not believed as the daemon",
        )


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return True  # vanished meanwhile: keep the "stale" reading


def _perm_hint(path: str) -> str:
    try:
        st = os.stat(path)
    except OSError:
        return ""
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    return (
        f" (mode {stat.S_IMODE(st.st_mode):04o} {owner}:{group}): run as root or as a member "
        f"of group {group!r} (daemon.socket_group)"
    )
