"""A queue mirror in a place that cannot be written is refused at start, naming the queue and the path."""

import os

import pytest

from trivium.buffer.queue_mirror import JsonlMirror, SqlMirror, open_mirror
from trivium.errors import UserError


def unwritable_dir(tmp_path):
    """A directory this process cannot write into: read-only for a normal user; for root
    (who ignores permissions) a path below a regular file, which fails the same way."""
    if os.geteuid() != 0:
        folder = tmp_path / "read_only"
        folder.mkdir(mode=0o500)
        return folder
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    return blocker


@pytest.mark.parametrize("name", ["mirror.jsonl", "mirror.db"])
def test_unwritable_mirror_path_is_a_clear_error_at_start(tmp_path, name):
    path = unwritable_dir(tmp_path) / name
    with pytest.raises(UserError, match=rf"Queue 'experiences': cannot write its mirror {path}: .*"
                                        r"Point the queue `path` to a writable place"):
        open_mirror(str(path), "experiences")


def test_writable_mirrors_open_and_create_their_files(tmp_path):
    jsonl = open_mirror(str(tmp_path / "deep" / "mirror.jsonl"), "q")
    assert isinstance(jsonl, JsonlMirror) and (tmp_path / "deep" / "mirror.jsonl").exists()
    sql = open_mirror(f"sqlite:///{tmp_path / 'mirror.db'}", "q")
    assert isinstance(sql, SqlMirror) and sql.restore() == []
