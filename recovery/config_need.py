"""``need``: a required dataclass field with its help text, the companion of
:func:`recovery.config.opt` for options dataclasses that the command line does not build."""

from __future__ import annotations

import dataclasses
from typing import Any


def need(help: str) -> Any:
    """A dataclass field without a default, carrying its ``help`` text in the metadata
    :func:`recovery.config.opt` writes."""
    return dataclasses.field(metadata={"help": help, "flag": None, "short": None,
                                       "choices": None, "argument": False, "required": True})
