"""PID 1 of a container: its mounts, then its command, with signals passed on and orphans reaped.

The kubelet starts every container as ``unshare --mount --pid --propagation private --fork
--kill-child --mount-proc python -I -S container_init.py ...``: ``unshare`` gives it its own mount and PID
namespaces and forks this file as PID 1 of the new PID namespace (so ``kill -2 1``, or KPO's
``kill -2 $(pgrep -f sh)`` in an exec, reaches the container's processes only). Standard library
builtins only, never imported by the emulator: its start-up is each container's (no ``json``,
``signal`` or ``enum`` import; ``ctypes`` only for a container with volumes; ``posix_spawn``,
as a fork of a Python process costs milliseconds).

    container_init.py STATUS_FD CWD FALLBACK_CWD KEEP_LC_CTYPE N [SOURCE TARGET RO]*N -- COMMAND [ARGS...]

The environment is the container's. This init bind-mounts each volume at its mount path (``RO``
1: remounted read-only), starts the command, passes the signals it gets on to it, reaps orphans
and exits with the command's status (``128 + N`` when signal N ended it). The command is not
PID 1, so SIGTERM ends it by default as it ends a process under ``docker run --init`` (tini); the
kubelet sends its SIGTERM here (``unshare`` itself blocks it), so it reaches the main process
only. One session holds them all: the kubelet's ``kill_container`` ends them all.

``unshare --mount-proc`` mounts the PID namespace's own ``/proc`` (``ps``, ``pgrep``, the
nvidia-smi shim's session readings). STATUS_FD gets ``F`` and ``exec: "cmd": <error>``
if the mounts or the command's start fail, ``S`` once the command runs: the kubelet's "started"
signal.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # ``signal`` imports ``enum``: milliseconds a container
import os
import sys

MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC = 1, 32, 4096, 16384
FORWARDED = (
    _signal.SIGTERM,
    _signal.SIGINT,
    _signal.SIGHUP,
    _signal.SIGQUIT,
    _signal.SIGUSR1,
    _signal.SIGUSR2,
)

#: Every signal a process can catch or ignore (not SIGKILL and SIGSTOP).
DEFAULTED = tuple(s for s in _signal.valid_signals() if s not in (_signal.SIGKILL, _signal.SIGSTOP))


def _bind_mounts(mounts: list[tuple[str, str, bool]]) -> None:
    import ctypes  # only containers with volumes pay for it

    libc = ctypes.CDLL(None, use_errno=True)

    def mount(source: str | None, target: str, flags: int) -> None:
        encoded = source.encode() if source is not None else None
        if libc.mount(encoded, target.encode(), None, ctypes.c_ulong(flags), None) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"mount {source} on {target}: {os.strerror(error)}")

    # Every source is opened before the first mount and mounted through its descriptor, as runc does: a
    # volume mounted at /tmp would otherwise hide the sources that live under the host's /tmp (the pod's
    # own directory, its termination-message file), and the next mount would find nothing there.
    held: list[tuple[int, str, str, bool]] = []
    try:
        for source, target, read_only in mounts:
            try:
                held.append((os.open(source, os.O_PATH | os.O_CLOEXEC), source, target, read_only))
            except OSError as error:
                raise OSError(error.errno, f"mount {source} on {target}: {os.strerror(error.errno or 0)}") from None
        for fd, source, target, read_only in held:
            try:
                mount(f"/proc/self/fd/{fd}", target, MS_BIND | MS_REC)
            except OSError as error:
                raise OSError(error.errno, f"mount {source} on {target}: {os.strerror(error.errno or 0)}") from None
            if read_only:
                mount(None, target, MS_BIND | MS_REMOUNT | MS_RDONLY)
    finally:
        for fd, *_ in held:
            os.close(fd)


def _fail(status_fd: int, message: str) -> None:
    os.write(status_fd, b"F" + message.encode())
    os._exit(128)


def main(argv: list[str]) -> None:
    status_fd, cwd, fallback, keep_lc_ctype, count = int(argv[1]), argv[2], argv[3], argv[4] == "1", int(argv[5])
    fields = argv[6 : 6 + 3 * count]
    mounts = [(fields[i], fields[i + 1], fields[i + 2] == "1") for i in range(0, len(fields), 3)]
    command = argv[6 + 3 * count + 1 :]
    env = dict(os.environ)
    if not keep_lc_ctype:  # Python's own C-locale coercion (PEP 538) set it: not the container's
        env.pop("LC_CTYPE", None)
    os.set_inheritable(status_fd, False)
    scratch = os.open(fallback, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)  # before a mount can hide it
    try:
        if mounts:
            _bind_mounts(mounts)
    except OSError as error:
        _fail(status_fd, f"failed to set up the container's mounts: {error.strerror or error}")
    try:
        try:
            os.chdir(cwd)  # after the mounts: a working directory in a volume is the volume's
        except OSError:  # no such working directory (or one a mount hid): the pod's scratch directory, as before
            os.fchdir(scratch)
        os.close(scratch)
        # The signals to pass on wait, blocked, until their handlers are in place (as tini does): a
        # SIGTERM that came between the command's start and the handlers would otherwise end this
        # process with the default action and leave the command running, orphaned.
        _signal.pthread_sigmask(_signal.SIG_BLOCK, FORWARDED)
        # Every signal at its default and none blocked, as a container runtime starts a container's
        # process: one this file inherited ignored (a test runner in a background job ignores
        # SIGINT) would otherwise stay ignored, and POSIX shells then silently skip ``trap ... INT``
        # (KPO's xcom sidecar).
        child = os.posix_spawnp(command[0], command, env, setsigdef=DEFAULTED, setsigmask=())
    except OSError as error:
        _fail(status_fd, f'exec: "{command[0]}": {error.strerror or error}')

    def forward(received: int, _frame: object) -> None:
        try:  # noqa: SIM105 (contextlib's import would cost every container start)
            os.kill(child, received)
        except ProcessLookupError:
            pass

    for signum in FORWARDED:
        _signal.signal(signum, forward)
    os.write(status_fd, b"S")  # not EOF: unshare, our parent, holds this pipe open too
    os.close(status_fd)
    _signal.pthread_sigmask(_signal.SIG_UNBLOCK, FORWARDED)  # any that waited is passed on now
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(0)
        if pid == child:
            os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))


if __name__ == "__main__":
    main(sys.argv)
