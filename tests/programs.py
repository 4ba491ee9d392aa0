"""Every program the suite starts, seen through Python's audit hooks and held to two rules.

1. **Nothing outside Python that the install step does not bring.** A program is fine when it is
   Python (an interpreter, or anything installed in this virtual environment: ``airflow``,
   ``accelerate``, Playwright's driver), one the standard library only asks when it is there
   (``PROBED_IF_PRESENT``), was written by the tests (under the temporary directory
   or this checkout), belongs to one of Debian's Essential packages (``BASE_PROGRAMS``: on every
   Debian or Ubuntu system), or is declared for ``make test`` in ``tools/system-packages.txt``,
   which the Makefile installs before any test runs. Anything else fails the test that started it:
   a fresh machine would not have it.
2. **``-m "not slow"`` means no Airflow, no browser, no training.** A test not marked ``slow`` that
   starts the ``airflow`` command, a browser (or Playwright's driver, which starts one) or an
   ``accelerate launch``/``torchrun`` fails, so that ``make test-quick`` stays the quick loop.

Only what the pytest process starts itself is seen (an audit hook lives in one interpreter):
``subprocess`` (asyncio's too), ``os.exec*``, ``os.posix_spawn*`` and ``os.system`` (as its shell).
The commands inside a shell script, and what a started program starts in turn, are not: the
Airflow stack's own children are Airflow and Python, the emulators run in this process, and a
browser that Playwright's driver starts is declared by the test through ``program()``.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MANIFEST = REPO / "tools" / "system-packages.txt"
#: Programs of Debian's Essential packages (coreutils, dash, bash, util-linux, findutils, grep, sed,
#: tar, gzip, hostname, dpkg; not procps's ``kill`` nor mount's ``mount``): every Debian and Ubuntu
#: system has them. ``tests/test_programs.py``
#: checks the claim against dpkg where it can.
BASE_PROGRAMS = frozenset(
    {
        "sh", "bash", "dash",  # dash, bash
        "sleep", "true", "false", "cat", "echo", "env", "ls", "mkdir", "rm", "touch", "id",
        "printf", "head", "tail", "test", "timeout", "nohup", "yes", "stat", "chmod", "date", "uname",  # coreutils
        "unshare", "nsenter", "setsid", "flock", "runuser",  # util-linux
        "grep", "sed", "find", "xargs", "tar", "gzip", "hostname", "dpkg-query",
    }
)  # fmt: skip
#: Programs the standard library asks when they are there and does without when they are not:
#: ``platform.architecture()`` runs ``file`` on the interpreter (torch and accelerate call it).
PROBED_IF_PRESENT = frozenset({"file"})
#: Any Python interpreter (a test may look for an older one to check the shipped profiler on).
PYTHON_NAME = re.compile(r"python(\d+(\.\d+)?)?")
#: What a quick test must not start, by the program's name or an argument that names it.
AIRFLOW = ("airflow",)
BROWSERS = ("chromium", "chromium-browser", "chrome", "google-chrome", "headless_shell")
TRAINING = ("accelerate", "torchrun", "accelerate.commands.launch", "torch.distributed.run")


BETWEEN_TESTS = "(between tests)"


def declared(target: str = "test") -> dict[str, str]:
    """``program:NAME`` and ``path:GLOB`` rows of the manifest for ``target``: program name -> Debian package."""
    programs = {}
    for line in MANIFEST.read_text().splitlines():
        fields = line.split(None, 3)
        row = len(fields) >= 3 and not line.lstrip().startswith("#") and fields[0].startswith(("program:", "path:"))
        if row and target in fields[2].split(","):
            programs[Path(fields[0].split(":", 1)[1]).name] = fields[1]
    return programs


def program(name: str) -> str:
    """The path of a declared system program, for a test that has something else start it (a
    browser through Playwright's driver); fails the test when it is not declared or not there."""
    import pytest

    packages = declared()
    if name not in packages:
        pytest.fail(f"{name} is not declared in {MANIFEST.relative_to(REPO)}: add it, with its Debian package")
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: make test installs it (Debian package {packages[name]})")
    RECORDER.seen(path, [path], via="declared by the test")
    return path


@dataclass
class Started:
    """One program start and who started it."""

    test: str
    path: str
    argv: list[str]


@dataclass
class Recorder:
    """Collects starts per test; the conftest asks it, after each test, what that test broke."""

    test: str = BETWEEN_TESTS
    started: list[Started] = field(default_factory=list)

    lock: threading.Lock = field(default_factory=threading.Lock)  # threads start programs too

    def seen(self, path: str, argv: Sequence[str], via: str = "") -> None:
        with self.lock:
            self.started.append(Started(self.test, path, [str(a) for a in argv]))

    def audit(self, event: str, args: tuple[object, ...]) -> None:
        if event == "subprocess.Popen":
            executable, argv = args[0], args[1]
            env = args[3]
        elif event in ("os.posix_spawn", "os.exec"):
            executable, argv, env = args[0], args[1], args[2]
        elif event == "os.system":  # its shell; the command line is the shell's to run
            executable, argv, env = "/bin/sh", ["sh", "-c", args[0]], None
        else:
            return
        words = [os.fsdecode(a) for a in argv] if isinstance(argv, (list, tuple)) else [os.fsdecode(argv)]  # type: ignore[arg-type]
        name = os.fsdecode(executable) if executable else (words[0] if words else "")  # type: ignore[arg-type]
        search = env.get("PATH") if isinstance(env, dict) else None
        path = name if os.sep in name else (shutil.which(name, path=search) or name)
        self.seen(path, words)

    def take(self, test: str) -> list[Started]:
        """What ``test`` started, and what anything started between tests (a background thread)."""
        with self.lock:
            mine = [s for s in self.started if s.test in (test, BETWEEN_TESTS)]
            self.started = [s for s in self.started if s not in mine]
        return mine


RECORDER = Recorder()


def _under(path: str, *roots: str | Path) -> bool:
    real = os.path.realpath(path)
    return any(real == str(root) or real.startswith(str(root).rstrip(os.sep) + os.sep) for root in roots)


def outside_the_install(started: Started) -> str | None:
    """Why this program would be missing on a fresh machine after ``make test``'s install, or None."""
    path, name = started.path, Path(started.path).name
    python = os.path.realpath(sys.executable)
    if os.path.realpath(path) == python or _under(path, sys.prefix, os.path.realpath(sys.prefix)):
        return None
    if PYTHON_NAME.fullmatch(name) or name in PROBED_IF_PRESENT:
        return None
    if _under(path, REPO, os.path.realpath(tempfile.gettempdir())):
        return None
    if name in BASE_PROGRAMS or name in declared():
        return None
    return (
        f"started {path} ({' '.join(started.argv[:4])}), which neither Python, Debian's Essential packages "
        f"nor {MANIFEST.relative_to(REPO)} bring: declare it there with its Debian package"
    )


def too_slow_for_quick(started: Started) -> str | None:
    """What a test outside the ``slow`` marker started that only ``slow`` tests may, or None."""
    name = Path(started.path).name
    words = {Path(word).name for word in started.argv}
    if name in AIRFLOW or ("-m" in started.argv and "airflow" in started.argv):
        return f"starts Airflow ({' '.join(started.argv[:3])})"
    if name in BROWSERS or "playwright" in Path(started.path).parts:
        return f"starts a browser ({name})"
    if name in TRAINING or words & set(TRAINING):
        return f"starts a training run ({' '.join(started.argv[:4])})"
    return None


def install() -> None:
    sys.addaudithook(RECORDER.audit)
