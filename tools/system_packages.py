"""Install, or name, the non-Python programs a ``make`` target needs (``tools/system-packages.txt``).

``python3 tools/system_packages.py ensure TARGET`` runs before the target does: everything present
is silent; anything missing is installed with ``apt-get`` when this user may (root, or ``sudo``
that asks no password); otherwise one line names the package and the command and the exit status
is 1, before any test or Airflow process starts. ``list TARGET`` prints the rows for a target.

A program that its package keeps off ``PATH`` (PostgreSQL's server programs live in
``/usr/lib/postgresql/<version>/bin``) is checked as ``path:GLOB``: present when the glob finds it.

Standard library only, Python 3.8: it runs before ``.venv`` exists, with whatever ``python3`` the
user has.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

MANIFEST = Path(__file__).resolve().with_name("system-packages.txt")


class Requirement(NamedTuple):
    """One row: what to check (``program:NAME`` on PATH, ``python:MODULE`` importable, ``path:GLOB``
    an executable file that the glob finds), the Debian
    package that brings it, the make targets that need it, and why."""

    check: str
    package: str
    targets: tuple[str, ...]
    why: str

    @property
    def kind(self) -> str:
        return self.check.split(":", 1)[0]

    @property
    def name(self) -> str:
        return self.check.split(":", 1)[1]

    def present(self) -> bool:
        if self.kind == "program":
            return shutil.which(self.name) is not None
        if self.kind == "path":
            return any(os.access(found, os.X_OK) for found in glob.glob(self.name))  # noqa: PTH207 (an absolute glob)
        return importlib.util.find_spec(self.name) is not None


def read(manifest: Path = MANIFEST) -> list[Requirement]:
    rows = []
    for number, line in enumerate(manifest.read_text().splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split(None, 3)
        if len(fields) < 4 or fields[0].split(":", 1)[0] not in ("program", "python", "path") or ":" not in fields[0]:
            expected = "'program:NAME|python:MODULE|path:GLOB PACKAGE TARGETS WHY'"
            raise SystemExit(f"{manifest}:{number}: expected {expected}")
        rows.append(Requirement(fields[0], fields[1], tuple(fields[2].split(",")), fields[3]))
    return rows


def needed(target: str, manifest: Path = MANIFEST) -> list[Requirement]:
    return [row for row in read(manifest) if target in row.targets]


def _installer() -> list[str] | None:
    """How this user installs Debian packages without a prompt, or None when they cannot."""
    if shutil.which("apt-get") is None:
        return None
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
        return ["sudo", "-n"]
    return None


def ensure(target: str, manifest: Path = MANIFEST) -> int:
    missing = [row for row in needed(target, manifest) if not row.present()]
    if not missing:
        return 0
    packages = sorted({row.package for row in missing})
    names = " ".join(packages)
    what = ", ".join(f"{row.name} ({row.why})" for row in missing)
    prefix = _installer()
    if prefix is None:
        how = (
            f"install the Debian package(s) {names} (sudo apt-get install {names})"
            if shutil.which("apt-get")
            else f"this system has no apt-get: put {', '.join(row.name for row in missing)} on PATH "
            f"(the Debian package(s) {names} bring them)"
        )
        print(f"make {target} needs {what}: {how}, then run make {target} again", file=sys.stderr)
        return 1
    print(f"make {target}: installing the Debian package(s) {names} for {what}", flush=True)
    # sudo resets the environment: the frontend goes on the command line, through env(1).
    # A fresh cloud VM's unattended-upgrades holds dpkg's lock for minutes after boot: wait for it.
    apt = [*prefix, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "-o", "DPkg::Lock::Timeout=300"]
    for arguments in (["update", "-qq"], ["install", "-y", "-qq", *packages]):
        done = subprocess.run([*apt, *arguments], capture_output=True, text=True)
        if done.returncode != 0:  # its output only when it failed: a working install is one line
            sys.stderr.write(done.stdout + done.stderr)
            print(f"make {target}: 'apt-get {' '.join(arguments)}' failed; install {names} by hand", file=sys.stderr)
            return 1
    still = [row.check for row in missing if not row.present()]
    if still:
        print(f"make {target}: {', '.join(still)} still missing after installing {names}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("ensure", "list"):
        print("usage: system_packages.py ensure|list TARGET", file=sys.stderr)
        return 2
    command, target = argv
    if command == "list":
        for row in needed(target):
            print(f"{row.check}\t{row.package}\t{row.why}")
        return 0
    return ensure(target)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
