"""recovery.display: the one place that makes input text safe to show a person."""

from __future__ import annotations

import pytest

from recovery.display import plain_label, printable


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\x1b[2J", "\\x1b[2J"),                               # clear screen
        ("\x1b]8;;http://x\x1b\\", "\\x1b]8;;http://x\\x1b\\"),  # OSC 8 link
        ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),            # window title
        ("a\rb", "a\\rb"),
        ("\x9b31m", "\\x9b31m"),                               # one-byte CSI
        ("\u202eabc", "\\u202eabc"),                           # bidi override
        ("\u2066x\u2069", "\\u2066x\\u2069"),                  # bidi isolates
        ("a\u2028b", "a\\u2028b"),                             # line separator
        ("\x00\x7f", "\\x00\\x7f"),
        ("a\nb\tc", "a\\nb\\tc"),
    ],
)
def test_printable_escapes_every_control_character(text, shown):
    assert printable(text) == shown


def test_printable_keeps_ordinary_text_and_converts_other_values():
    assert printable("Zürich ✈️ airline/17 [x] $y$") == "Zürich ✈️ airline/17 [x] $y$"
    assert printable(17) == "17"
    assert printable(None) == "None"


def test_printable_can_keep_newlines_and_tabs_but_not_the_rest():
    assert printable("a\nb\tc\rd\x1b", keep_newlines=True) == "a\nb\tc\\rd\\x1b"


def test_plain_label_is_never_mathtext_and_shows_the_text():
    from matplotlib.text import Text

    for text in ("$\\undefinedmacro$", "$x$ and $y$", "a $ b", "\x1b[2J$x$"):
        label = plain_label(text)
        shown, is_math = Text()._preprocess_math(label)
        assert not is_math, label
        assert shown == printable(text)


def test_every_commands_error_message_is_shown_escaped(tmp_path) -> None:
    """An error message that quotes a file name holding a window-title sequence shows it
    escaped (the shared option layer of every command)."""
    from tests.cli_support import run_cli

    evil = tmp_path / "s\x1b]0;owned\x07.json"
    evil.write_text("not json")
    data = tmp_path / "rows.jsonl"
    data.write_text('{"prompt": "x"}\n')
    result = run_cli("budgetmix", "assign", "--schedule", evil, "--dataset", data,
                     "--out", tmp_path / "out.jsonl")
    assert result.exit_code != 0
    assert "\x1b" not in result.output and "\x07" not in result.output
    assert "\\x1b]0;owned\\x07" in result.output


def test_recovery_ingest_shows_a_file_name_with_escapes_escaped(tmp_path) -> None:
    from tests.cli_support import run_cli

    evil = tmp_path / "r\x1b]0;owned\x07.jsonl"
    evil.write_text('{"task_id": "t", "success": true, "turns": [{"action": "a"}]}\n')
    result = run_cli("ingest", evil, "--store", tmp_path / "s.duckdb")
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output
    assert "r\\x1b]0;owned\\x07.jsonl: 1 trajectories" in result.output
