"""Detection with the new readers registered: every fixture is detected as its own format, and
the new sniffers accept none of the files of the formats that were there before them."""

from __future__ import annotations

from pathlib import Path

import pytest

from recovery.formats import detect_format, get_reader, head_bytes, known_formats

from ._support import FIXTURES

NEW = ("verl", "atif", "sweagent", "minisweagent", "balrog", "art")


def fixture_files() -> list[Path]:
    return [p for p in sorted(FIXTURES.iterdir()) if p.name.split(".")[0] in known_formats()]


def test_the_new_formats_are_registered() -> None:
    assert set(NEW) <= set(known_formats())
    assert [name for name in known_formats() if get_reader(name).directory] == ["balrog"]


@pytest.mark.parametrize("path", fixture_files(), ids=lambda p: p.name)
def test_each_fixture_is_detected_as_its_format(path: Path) -> None:
    assert detect_format(path) == path.name.split(".")[0]


@pytest.mark.parametrize("path", [p for p in fixture_files() if p.name.split(".")[0] not in NEW],
                         ids=lambda p: p.name)
def test_new_sniffers_refuse_the_older_formats(path: Path) -> None:
    head = b"" if path.is_dir() else head_bytes(path)
    accepted = [name for name in NEW if get_reader(name).sniff(path, head)]
    assert accepted == []


def test_a_folder_no_format_reads_names_its_files(tmp_path):
    """A folder of files (Who&When's layout) is refused with the glob to give instead."""
    from recovery.formats.base import UnknownFormatError
    from recovery.formats.registry import detect_format

    (tmp_path / "1.json").write_text("{}")
    with pytest.raises(UnknownFormatError) as info:
        detect_format(tmp_path)
    assert f"{tmp_path}/*.json" in str(info.value)
    assert "--format" not in str(info.value)
