"""The one contract: outside prm/kinds/ nothing switches on the PRM kind; every command goes
through the registry (:mod:`prm.kinds`)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SWITCH = re.compile(
    r"\b(model_)?kind\s*[!=]=\s*|is_structured_folder|isinstance\([^)]*Kind\b"
    r"|\.backbone is (not )?None"  # a backbone given = a neural kind: the kind in disguise
)


def _sources() -> list[Path]:
    prm = [p for p in (ROOT / "prm").rglob("*.py") if "kinds" not in p.relative_to(ROOT).parts]
    return prm + sorted((ROOT / "agent_recovery_cli" / "prm").rglob("*.py"))


def test_no_switch_on_the_kind_outside_the_registry() -> None:
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for path in _sources()
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if SWITCH.search(line) and "spec.kind" not in line]  # spec.kind: the folder format
    assert not found, "\n".join(found)


def test_the_switch_pattern_finds_what_it_should() -> None:
    for line in ('if config.model_kind == "structured":', "if kind != 'tfidf':",
                 "isinstance(model, StructuredKind)", "if is_structured_folder(path):",
                 'mode = config.mode if config.backbone is not None else "x"'):
        assert SWITCH.search(line), line
    assert not SWITCH.search("kind = kind_class(name)")
