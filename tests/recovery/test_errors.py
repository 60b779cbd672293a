"""One tree of errors the user can fix; every other exception is a bug and keeps its traceback.

A :class:`recovery.errors.Problem` reaches the command line as one line (a usage error, exit
status 2, or an error, exit status 1); anything else (a ``ZeroDivisionError``, a plain
``ValueError`` or ``RuntimeError`` from a bug) must not be turned into such a line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import analyses.report.build
import prm.train
from agent_recovery_cli.prm import main as prm_main
from agent_recovery_cli.recovery import main as recovery_main
from analyses.budgetmix.reference.train import parse_mode
from recovery.errors import InputProblem, Problem, UsageProblem
from recovery.formats import UnknownFormatError
from recovery.marking import RuleError
from recovery.query import QueryRefused
from recovery.schema import RecordError
from recovery.store import IngestError

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "formats" / "canonical.jsonl"

USER_ERRORS = (UsageProblem, InputProblem, RecordError, UnknownFormatError, IngestError,
               RuleError, QueryRefused)


def _all_subclasses(cls: type) -> set[type]:
    out = set()
    for sub in cls.__subclasses__():
        out |= {sub, *_all_subclasses(sub)}
    return out


@pytest.mark.parametrize("cls", USER_ERRORS, ids=lambda c: c.__name__)
def test_every_user_error_is_a_problem(cls: type) -> None:
    assert issubclass(cls, Problem)


def test_the_tree_has_one_root() -> None:
    """No problem is also a ValueError or a RuntimeError, so ``except ValueError`` (meant for
    a bug or a library's own error) never catches one, nor ``except Problem`` a bug."""
    found = _all_subclasses(Problem)
    assert set(USER_ERRORS) <= found
    for cls in found | {Problem}:
        assert not issubclass(cls, (ValueError, RuntimeError)), cls
    assert Problem.__bases__ == (Exception,)
    ours = {c for c in found if c.__module__.split(".")[0] in ("recovery", "analyses", "prm")}
    assert {c for c in ours if Problem in c.__bases__} == {UsageProblem, InputProblem}


def test_library_checks_of_user_values_raise_problems() -> None:
    with pytest.raises(UsageProblem, match="unknown mode"):
        parse_mode("nope")


def _analyze(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> Result:
    def broken(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr(analyses.report.build, "build_report", broken)
    return CliRunner().invoke(recovery_main, ["analyze", str(FIXTURE), "--n-boot", "0"])


def _train(monkeypatch: pytest.MonkeyPatch, error: BaseException, tmp_path: Path) -> Result:
    def broken(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr(prm.train, "train", broken)
    return CliRunner().invoke(prm_main, ["train", "--store", str(tmp_path / "s.duckdb"),
                                         "--out", str(tmp_path / "model")])


BUGS = [ZeroDivisionError("division by zero"), ValueError("a bug's ValueError"),
        RuntimeError("a bug's RuntimeError"), KeyError("a bug's KeyError")]


@pytest.mark.parametrize("bug", BUGS, ids=lambda e: type(e).__name__)
def test_a_bug_in_analyze_keeps_its_traceback(monkeypatch, bug) -> None:
    result = _analyze(monkeypatch, bug)
    assert result.exception is bug  # propagated, not a click exit
    assert not isinstance(result.exception, SystemExit)
    assert "Usage:" not in result.output and "Error:" not in result.output


@pytest.mark.parametrize("bug", BUGS, ids=lambda e: type(e).__name__)
def test_a_bug_in_prm_train_keeps_its_traceback(monkeypatch, tmp_path, bug) -> None:
    result = _train(monkeypatch, bug, tmp_path)
    assert result.exception is bug
    assert "Error:" not in result.output


class _OtherProblem(Problem):
    """A problem that is neither a usage nor an input problem: still one line, exit 1."""


PROBLEMS = [(UsageProblem("--k: bad value"), 2), (InputProblem("x.jsonl: unreadable"), 1),
            (RecordError("a bad record", file="x.jsonl", line=3), 1),
            (_OtherProblem("something the user can fix"), 1)]


@pytest.mark.parametrize(("problem", "status"), PROBLEMS, ids=lambda p: type(p).__name__)
def test_a_problem_in_analyze_is_one_line(monkeypatch, problem, status) -> None:
    result = _analyze(monkeypatch, problem)
    assert result.exit_code == status, result.output
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    assert f"Error: {problem}" in result.output
    error_lines = [line for line in result.output.splitlines() if str(problem) in line]
    assert error_lines == [f"Error: {problem}"]


@pytest.mark.parametrize(("problem", "status"), PROBLEMS, ids=lambda p: type(p).__name__)
def test_a_problem_in_prm_train_is_one_line(monkeypatch, tmp_path, problem, status) -> None:
    result = _train(monkeypatch, problem, tmp_path)
    assert result.exit_code == status, result.output
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    assert f"Error: {problem}" in result.output


def test_a_real_usage_problem_of_analyze_is_one_line() -> None:
    result = CliRunner().invoke(recovery_main, ["analyze", str(FIXTURE), "--baseline", "nope",
                                                "--n-boot", "0"])
    assert result.exit_code == 2, result.output
    assert "baseline run 'nope' not found" in result.output
    assert "Traceback" not in result.output
