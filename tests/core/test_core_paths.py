"""core.paths: the file that keeps an output's folder from being made."""
from __future__ import annotations

from avatar_app.core.paths import file_in_the_way


def test_the_first_file_among_the_folder_and_its_parents_is_named(tmp_path):
    (tmp_path / "a").write_text("x")
    assert file_in_the_way(tmp_path / "a" / "b" / "c") == tmp_path / "a"
    assert file_in_the_way(tmp_path / "a") == tmp_path / "a"
    assert file_in_the_way(tmp_path / "new" / "deeper") is None  # missing folders can be made
    assert file_in_the_way(tmp_path) is None
