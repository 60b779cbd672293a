"""``opt`` and ``need``: the dataclass fields that carry their help text (and, for ``opt``, how
the command line shows them)."""

from __future__ import annotations

import dataclasses

import pytest

from recovery.config import need, opt


@dataclasses.dataclass(frozen=True)
class _Options:
    path: str = need("The file.")
    out: str | None = opt(None, "Where to write.", short="-o", required=True)
    ks: list[int] = opt(help="Widths.", default_factory=lambda: [1, 2])


def test_fields_carry_help_and_command_line_spec() -> None:
    fields = {f.name: f for f in dataclasses.fields(_Options)}
    assert fields["path"].metadata["help"] == "The file."
    assert fields["out"].metadata == {"help": "Where to write.", "flag": None, "short": "-o",
                                      "choices": None, "argument": False, "required": True}
    assert _Options("a").ks == [1, 2] and _Options("a").ks is not _Options("a").ks


def test_need_has_no_default() -> None:
    with pytest.raises(TypeError):
        _Options()  # type: ignore[call-arg]


def test_opt_refuses_an_unknown_command_line_key() -> None:
    with pytest.raises(TypeError, match="shrot"):
        opt(None, "x", shrot="-o")  # type: ignore[call-arg]
