"""experiments.huge_pages: when ``python -m experiments`` adds glibc's huge-page tunable, and that
it re-executes the same command line with it (the end-to-end check is in test_multiprocess.py)."""
import platform
import sys

import pytest

from experiments import huge_pages

ON = "glibc.malloc.hugetlb=1"


@pytest.mark.parametrize("environ, glibc, expected", [
    ({}, (2, 36), ON),
    ({}, (2, 35), ON),
    ({}, (3, 0), ON),
    ({}, (2, 34), None),  # the tunable is glibc 2.35's
    ({}, None, None),  # not glibc (macOS, musl)
    ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, (2, 36), "glibc.malloc.arena_max=2:" + ON),
    ({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, (2, 36), None),  # the user's choice stays
    ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=2"}, (2, 36), None),
    ({"GLIBC_TUNABLES": "glibc.malloc.hugetlb_x=1"}, (2, 36), "glibc.malloc.hugetlb_x=1:" + ON),
])
def test_with_huge_pages(environ, glibc, expected):
    assert huge_pages.with_huge_pages(environ, glibc) == expected


def test_glibc_version_reads_the_c_library():
    """Against Python's own reading of the C library the interpreter is linked to."""
    name, version = platform.libc_ver()
    expected = tuple(int(x) for x in version.split(".")[:2]) if name == "glibc" else None
    assert huge_pages.glibc_version() == expected


def test_reexec_runs_the_same_command_line_once(monkeypatch):
    calls = []
    monkeypatch.setattr(huge_pages.os, "execve", lambda *a: calls.append(a))
    monkeypatch.setattr(huge_pages, "glibc_version", lambda: (2, 36))
    monkeypatch.setattr(sys, "orig_argv", ["python", "-m", "experiments", "run", "x"])
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.delenv(huge_pages.REEXECUTED, raising=False)
    monkeypatch.setenv("KEEP_ME", "1")
    huge_pages.reexec_with_huge_pages()
    assert len(calls) == 1
    path, argv, env = calls[0]
    assert path == sys.executable and argv == ["python", "-m", "experiments", "run", "x"]
    assert env["GLIBC_TUNABLES"] == ON and env["KEEP_ME"] == "1" and env[huge_pages.REEXECUTED] == "1"
    monkeypatch.setenv("GLIBC_TUNABLES", ON)  # the new process: nothing more to do
    huge_pages.reexec_with_huge_pages()
    monkeypatch.delenv("GLIBC_TUNABLES")  # a new process that lost the tunable still runs only once
    monkeypatch.setenv(huge_pages.REEXECUTED, "1")
    huge_pages.reexec_with_huge_pages()
    assert len(calls) == 1


def test_reexec_failure_goes_on_without_huge_pages(monkeypatch, capsys):
    def refuse(*args):
        raise PermissionError("not allowed")

    monkeypatch.setattr(huge_pages.os, "execve", refuse)
    monkeypatch.setattr(huge_pages, "glibc_version", lambda: (2, 36))
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.delenv(huge_pages.REEXECUTED, raising=False)
    huge_pages.reexec_with_huge_pages()
    assert "running without huge pages" in capsys.readouterr().err
