"""The install step and the suite agree on the programs outside Python (``tools/system-packages.txt``).

``tools/system_packages.py`` runs before any test in ``make test``; ``tests/programs.py`` fails a test
that starts a program the install step does not bring. These tests hold both to the manifest, and
check the claim that ``BASE_PROGRAMS`` come with every Debian system against dpkg where there is one.
The installer tests put a stand-in ``apt-get`` and ``sudo`` on PATH (a boundary we do not own and
cannot run here without changing the machine): each says what it stands in for.
"""

from __future__ import annotations

import os
import runpy
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import programs

TOOL = programs.REPO / "tools" / "system_packages.py"


@pytest.fixture(scope="module")
def tool() -> dict[str, Any]:
    return runpy.run_path(str(TOOL))


def ensure(target: str, manifest: Path, path: str, uid: int = 0) -> subprocess.CompletedProcess[str]:
    """The tool as make runs it, with ``PATH`` and the effective user the test chooses."""
    code = (
        f"import os, runpy, sys; os.geteuid = lambda: {uid}; tool = runpy.run_path({str(TOOL)!r}); "
        f"sys.exit(tool['ensure']({target!r}, __import__('pathlib').Path({str(manifest)!r})))"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PATH": path}, timeout=60
    )


def stand_in(directory: Path, name: str, script: str) -> None:
    directory.mkdir(exist_ok=True)
    (directory / name).write_text("#!/bin/sh\n" + script)
    (directory / name).chmod(0o755)


def test_the_suite_and_the_tool_read_the_same_rows(tool: dict[str, Any]) -> None:
    rows = tool["needed"]("test")
    assert {Path(row.name).name: row.package for row in rows if row.kind != "python"} == programs.declared("test")
    # the browser tests' browser; kubectl against the emulator; the Kubernetes emulator's tmpfs volumes; the
    # e2e stack's PostgreSQL; the soak's Redis (tests/testing/test_redis.py)
    assert programs.declared("test") == {
        "chromium": "chromium", "kubectl": "kubernetes-client", "mount": "mount", "umount": "mount",
        "initdb": "postgresql", "pg_ctl": "postgresql", "redis-server": "redis-server",
    }  # fmt: skip
    assert {row.check for row in tool["needed"]("venv")} == {"python:ensurepip"}
    for row in tool["read"]():
        assert row.why and row.package and set(row.targets) <= {"venv", "test", "demo", "soak"}


def test_the_makefile_runs_the_tool_before_the_targets_that_need_it() -> None:
    makefile = (programs.REPO / "Makefile").read_text()
    assert "SYSTEM_PACKAGES := $(PYTHON) tools/system_packages.py ensure" in makefile
    assert "\tpytest: system-packages-test" not in makefile  # a prerequisite, not a recipe line
    for target, first in (("test:", "system-packages-test"), ("pytest:", "system-packages-test")):
        line = next(line for line in makefile.splitlines() if line.startswith(target))
        assert line.split()[1] == first, line
    assert "\t@$(SYSTEM_PACKAGES) test" in makefile and "\t@$(SYSTEM_PACKAGES) demo" in makefile
    assert "\t$(SYSTEM_PACKAGES) venv" in makefile


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="no dpkg here: Debian's Essential set cannot be read")
def test_base_programs_come_from_debian_essential_packages() -> None:
    """Each program the suite may start without declaring it belongs to a package marked Essential."""
    paths: dict[str, str] = {}  # a path dpkg may know (merged /usr: either spelling) -> program
    for name in sorted(programs.BASE_PROGRAMS):
        found = shutil.which(name)
        if found is None:
            continue
        real = os.path.realpath(found)
        for spelling in (real, real.replace("/usr/", "/", 1), "/usr" + real if not real.startswith("/usr/") else real):
            paths[spelling] = name  # merged /usr: dpkg may know /bin/x or /usr/bin/x, /sbin/x or /usr/sbin/x
        paths[found] = name
    owners = subprocess.run(["dpkg-query", "-S", *sorted(paths)], capture_output=True, text=True).stdout
    package_of: dict[str, str] = {}
    for line in owners.splitlines():  # "coreutils: /usr/bin/sleep"
        package, _, path = line.partition(": ")
        if path in paths:
            package_of[paths[path]] = package.split(":")[0]
    listed = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package} ${Essential}\\n", *sorted(set(package_of.values()))],
        capture_output=True,
        text=True,
    ).stdout
    essential = {line.split()[0] for line in listed.splitlines() if line.endswith(" yes")}
    present = {paths[path] for path in paths}
    assert {name: package_of.get(name) for name in present if package_of.get(name) not in essential} == {}


def test_a_program_a_fresh_machine_lacks_is_named_and_python_is_not() -> None:
    started = programs.Started
    assert programs.outside_the_install(started("t", "/usr/bin/helm", ["helm", "list"])) is not None
    assert programs.outside_the_install(started("t", "/bin/sh", ["/bin/sh", "-c", "true"])) is None
    assert programs.outside_the_install(started("t", sys.executable, [sys.executable])) is None
    assert programs.outside_the_install(started("t", "/opt/python3.8/bin/python3.8", ["python3.8"])) is None
    assert programs.outside_the_install(started("t", "/usr/bin/chromium", ["chromium"])) is None  # declared


def test_what_a_quick_test_may_not_start() -> None:
    started = programs.Started
    assert programs.too_slow_for_quick(started("t", "/v/bin/airflow", ["/v/bin/airflow", "scheduler"]))
    assert programs.too_slow_for_quick(started("t", sys.executable, [sys.executable, "-m", "airflow", "dags"]))
    assert programs.too_slow_for_quick(started("t", "/usr/bin/chromium", ["chromium", "--headless"]))
    driver = "/v/lib/python3.11/site-packages/playwright/driver/node"
    assert programs.too_slow_for_quick(started("t", driver, [driver, "run-driver"]))
    launch = [sys.executable, "-m", "accelerate.commands.launch", "train.py"]
    assert programs.too_slow_for_quick(started("t", sys.executable, launch))
    assert programs.too_slow_for_quick(started("t", "/v/bin/torchrun", ["torchrun", "x.py"]))
    assert programs.too_slow_for_quick(started("t", sys.executable, [sys.executable, "-c", "import airflow"])) is None
    assert programs.too_slow_for_quick(started("t", "/bin/sh", ["sh", "-c", "sleep 1"])) is None


def test_present_programs_need_nothing(tmp_path: Path) -> None:
    manifest = tmp_path / "packages.txt"
    manifest.write_text("program:sh  dash  test  the shell\npython:json  python3  test  a module\n")
    done = ensure("test", manifest, os.environ["PATH"])
    assert done.returncode == 0 and done.stdout == done.stderr == ""


def test_without_a_way_to_install_one_line_names_the_package_and_the_command(tmp_path: Path) -> None:
    """Not root, and a ``sudo`` stand-in that asks for a password (exits 1, as ``sudo -n`` does)."""
    manifest = tmp_path / "packages.txt"
    manifest.write_text("program:no-such-browser  some-browser  test  the browser tests\n")
    tools = tmp_path / "bin"
    stand_in(tools, "sudo", "exit 1\n")
    stand_in(tools, "apt-get", "echo apt-get must not run; exit 9\n")
    done = ensure("test", manifest, f"{tools}{os.pathsep}/usr/bin{os.pathsep}/bin", uid=1000)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "make test needs no-such-browser (the browser tests): install the Debian package(s) some-browser "
        "(sudo apt-get install some-browser), then run make test again"
    ]


def test_without_apt_get_one_line_names_the_program_and_the_package(tmp_path: Path) -> None:
    manifest = tmp_path / "packages.txt"
    manifest.write_text("program:no-such-browser  some-browser  test  the browser tests\n")
    tools = tmp_path / "bin"
    tools.mkdir()
    done = ensure("test", manifest, str(tools), uid=0)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "make test needs no-such-browser (the browser tests): this system has no apt-get: put "
        "no-such-browser on PATH (the Debian package(s) some-browser bring them), then run make test again"
    ]


def test_root_installs_what_is_missing_with_apt_get(tmp_path: Path) -> None:
    """An ``apt-get`` stand-in that records its arguments and, on install, puts the program on PATH."""
    manifest = tmp_path / "packages.txt"
    manifest.write_text("program:fresh-tool  fresh-package  test  a tool the tests start\n")
    tools, log = tmp_path / "bin", tmp_path / "apt.log"
    stand_in(
        tools,
        "apt-get",
        f'echo "$DEBIAN_FRONTEND $*" >> {log}\n'
        f'case " $* " in *" install "*) printf "#!/bin/sh\\n" > {tools}/fresh-tool;; esac\n'
        f"[ -f {tools}/fresh-tool ] && chmod +x {tools}/fresh-tool; exit 0\n",
    )
    done = ensure("test", manifest, f"{tools}{os.pathsep}/usr/bin{os.pathsep}/bin", uid=0)
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines() == [  # waiting for dpkg's lock, as on a VM that has just booted
        "noninteractive -o DPkg::Lock::Timeout=300 update -qq",
        "noninteractive -o DPkg::Lock::Timeout=300 install -y -qq fresh-package",
    ]
    assert "installing the Debian package(s) fresh-package" in done.stdout


def test_an_install_that_does_not_bring_the_program_fails(tmp_path: Path) -> None:
    manifest = tmp_path / "packages.txt"
    manifest.write_text("program:never-there  wrong-package  test  a tool\n")
    tools = tmp_path / "bin"
    stand_in(tools, "apt-get", "exit 0\n")
    done = ensure("test", manifest, f"{tools}{os.pathsep}/usr/bin{os.pathsep}/bin", uid=0)
    assert done.returncode == 1 and "program:never-there still missing" in done.stderr


def test_a_program_off_path_is_found_by_its_glob_and_installed_when_the_glob_finds_nothing(tmp_path: Path) -> None:
    """``path:GLOB`` rows (PostgreSQL's server programs live in a version directory off PATH): the
    ``apt-get`` stand-in, on install, creates the versioned file the glob looks for."""
    server = tmp_path / "lib" / "17" / "bin"
    manifest = tmp_path / "packages.txt"
    manifest.write_text(f"path:{tmp_path}/lib/*/bin/initdb  a-server  test  a server\n")
    tools = tmp_path / "bin"
    stand_in(tools, "apt-get", f'case " $* " in *" install "*) mkdir -p {server}; printf "" > {server}/initdb;; esac\n')
    env_path = f"{tools}{os.pathsep}/usr/bin{os.pathsep}/bin"
    done = ensure("test", manifest, env_path, uid=0)  # the file comes, but not executable: still missing
    assert done.returncode == 1 and f"path:{tmp_path}/lib/*/bin/initdb still missing" in done.stderr
    (server / "initdb").chmod(0o755)
    done = ensure("test", manifest, env_path, uid=0)
    assert done.returncode == 0 and done.stdout == done.stderr == ""
