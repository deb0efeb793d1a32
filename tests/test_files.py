"""lookupkit.files' outputs: an output that cannot be written is refused before any work, in one line that
says why (a read-only file system is not "permission denied"), and nothing is left behind."""

from __future__ import annotations

import errno
import tempfile

import pytest

from lookupkit.errors import InputError
from lookupkit.files import atomic_writer, check_writable


def refuse(monkeypatch, code: int):
    def mkstemp(*_a, **_k):
        raise OSError(code, "refused")

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)


@pytest.mark.parametrize("code,fragment", [(errno.EROFS, "is on a read-only file system"),
                                           (errno.EACCES, "permission denied"), (errno.EPERM, "permission denied"),
                                           (errno.ENOSPC, "no space left on device")])
def test_write_errors_are_named(tmp_path, monkeypatch, code, fragment):
    refuse(monkeypatch, code)
    for attempt in (lambda: check_writable(tmp_path / "out.lkc"), lambda: atomic_writer(tmp_path / "out.lkc").__enter__()):
        with pytest.raises(InputError) as exc:
            attempt()
        assert fragment in str(exc.value) and "\n" not in str(exc.value)
    assert list(tmp_path.iterdir()) == []


def test_check_writable_leaves_nothing_behind_and_names_what_is_wrong(tmp_path):
    assert check_writable(tmp_path / "out.json") == tmp_path / "out.json"
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(InputError, match="it is a directory"):
        check_writable(tmp_path)
    with pytest.raises(InputError, match=f"directory {tmp_path / 'missing'} does not exist"):
        check_writable(tmp_path / "missing" / "out.json")


def test_a_folder_that_exists_but_takes_no_files_is_not_called_missing(tmp_path, monkeypatch):
    refuse(monkeypatch, errno.ENOENT)  # what /proc answers
    with pytest.raises(InputError) as exc:
        check_writable(tmp_path / "c.json")
    assert f"{tmp_path} does not take new files" in str(exc.value) and "does not exist" not in str(exc.value)
