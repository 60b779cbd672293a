"""Error marking and error spells (DESIGN 4): rules, precedence, spells, scoping."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from recovery.marking import (
    Rule,
    RuleError,
    RuleSet,
    builtin_rules,
    load_rules,
    rule_from_dict,
    rule_matches,
)
from recovery.schema import Trajectory, Turn
from recovery.store import IngestOptions, open_store
from tests.conftest import simulated_store

# --------------------------------------------------------------------------------------------
# Helpers


def _traj(
    task: str,
    turns: list[Turn],
    *,
    success: bool | None = False,
    sample: int = 0,
    run: str = "r",
) -> Trajectory:
    return Trajectory(run=run, task_id=task, turns=turns, success=success, sample=sample)


def _ok(i: int) -> Turn:
    return Turn(action=f"lookup(id={i})", observation=f"record {i}: status open")


def _err(i: int, kind: str = "tool_error") -> Turn:
    return Turn(action=f"lookup(id={i})", observation="fine", error=kind)


def _kinds(con, traj_id: str | None = None) -> list[str | None]:
    where = "" if traj_id is None else "WHERE traj_id = ?"
    params = [] if traj_id is None else [traj_id]
    return [r[0] for r in con.execute(
        f"SELECT error_kind FROM turns {where} ORDER BY traj_id, t", params
    ).fetchall()]


def _only_traj_id(con) -> str:
    return con.execute("SELECT traj_id FROM trajectories").fetchone()[0]


def _reference_spells(is_error: list[bool], success: bool | None) -> list[tuple]:
    """The definition spelled out turn by turn: (start, end, recovered, recovered_at, latency,
    fatal). A success's last turn is its success turn, which is never an error turn."""
    spells = []
    if success:
        is_error = [*is_error[:-1], False]
    n = len(is_error)
    t = 1
    while t <= n:
        if is_error[t - 1] and (t == 1 or not is_error[t - 2]):
            end = t
            while end < n and is_error[end]:
                end += 1
            recovered = end < n
            rec_at = end + 1 if recovered else None
            spells.append((
                t, end, recovered, rec_at, rec_at - t if recovered else None,
                (not recovered) and success is False,
            ))
            t = end + 1
        else:
            t += 1
    return spells


def _spells(con, traj_id: str) -> list[tuple]:
    return con.execute(
        "SELECT start_t, end_t, recovered, recovered_at, latency, fatal FROM error_spells "
        "WHERE traj_id = ? ORDER BY start_t",
        [traj_id],
    ).fetchall()


# --------------------------------------------------------------------------------------------
# Real data: tau-bench


def test_tau_bench_marks_exactly_the_error_tool_messages(con, memory_store, tau_airline):
    memory_store.ingest_file(tau_airline)
    counts = con.execute(
        "SELECT error_kind, count(*), count(DISTINCT traj_id) FROM turns WHERE is_error "
        "GROUP BY error_kind"
    ).fetchall()
    assert counts == [("tool_error", 73, 36)]
    # Independently of the rules engine: the turns with a tool message starting "Error:".
    raw = json.loads(Path(tau_airline).read_text())
    expected = 0
    for record in raw:
        pending_error = False
        for message in record["traj"]:
            if message["role"] == "assistant":
                expected += pending_error
                pending_error = False
            elif message["role"] == "tool" and message["content"].startswith("Error:"):
                pending_error = True
        expected += pending_error
    assert expected == 73
    # Nothing else fires there: each built-in rule alone, ignoring precedence.
    hits = {k: v for k, v in rule_matches(con).items() if v}
    assert hits == {
        "recovery/rules/taubench.toml: tau-bench tool error": 73,
        "recovery/rules/generic.toml: error report": 73,
    }
    spells = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE recovered), "
        "count(*) FILTER (WHERE latency <> recovered_at - start_t) FROM error_spells"
    ).fetchone()
    assert spells[0] > 0 and spells[2] == 0
    n_recovery_turns = con.execute(
        "SELECT count(*) FROM turns WHERE recovery_of IS NOT NULL"
    ).fetchone()[0]
    assert n_recovery_turns == spells[1]


# --------------------------------------------------------------------------------------------
# Spells


def test_spells_follow_design_definitions(con, memory_store):
    pattern = [True, True, False, True, False, False, True]
    turns = [_err(i) if e else _ok(i) for i, e in enumerate(pattern, start=1)]
    memory_store.ingest_trajectories([_traj("a", turns, success=False)])
    tid = _only_traj_id(con)
    assert _spells(con, tid) == [
        (1, 2, True, 3, 2, False),
        (4, 4, True, 5, 1, False),
        (7, 7, False, None, None, True),
    ]
    recovery_of = con.execute(
        "SELECT t, recovery_of FROM turns WHERE traj_id = ? AND recovery_of IS NOT NULL "
        "ORDER BY t", [tid]
    ).fetchall()
    assert recovery_of == [(3, 1), (5, 4)]


def test_a_mark_on_the_success_turn_starts_no_spell(con, memory_store):
    turns = [_ok(1), _err(2)]
    memory_store.ingest_trajectories([_traj("a", turns, success=True)])
    assert _spells(con, _only_traj_id(con)) == []
    # the mark stays as the data gave it
    assert con.execute("SELECT is_error FROM turns WHERE t = 2").fetchone() == (True,)


def test_a_spell_before_the_success_turn_recovers_there(con, memory_store):
    turns = [_ok(1), _err(2), _err(3)]
    memory_store.ingest_trajectories([_traj("a", turns, success=True)])
    assert _spells(con, _only_traj_id(con)) == [(2, 2, True, 3, 1, False)]


def test_open_spell_with_an_unknown_outcome_is_unrecovered_but_not_fatal(con, memory_store):
    turns = [_ok(1), _err(2)]
    memory_store.ingest_trajectories([_traj("a", turns, success=None)])
    assert _spells(con, _only_traj_id(con)) == [(2, 2, False, None, None, False)]


def test_spell_kind_is_the_kind_of_its_first_turn(con, memory_store):
    turns = [_ok(1), _err(2, "timeout"), _err(3, "tool_error"), _ok(4)]
    memory_store.ingest_trajectories([_traj("a", turns)])
    kinds = con.execute("SELECT kind FROM error_spells").fetchall()
    assert kinds == [("timeout",)]


def test_spells_equal_a_turn_by_turn_reference_on_every_short_pattern(con, memory_store):
    """Every error pattern of 1 to 8 turns, each with a success, a failure and no outcome."""
    patterns = [
        [bool(bits >> i & 1) for i in range(n)] for n in range(1, 9) for bits in range(2 ** n)
    ]
    outcomes = [True, False, None]
    trajs = [
        _traj(f"p{k}", [_err(i) if e else _ok(i) for i, e in enumerate(p, start=1)],
              success=outcome, sample=j)
        for k, p in enumerate(patterns)
        for j, outcome in enumerate(outcomes)
    ]
    memory_store.ingest_trajectories(trajs, options=IngestOptions(mark=False))
    memory_store.mark(RuleSet(repeat=False))
    spells = defaultdict(list)
    for row in con.execute(
        "SELECT tr.task_id, tr.sample, s.start_t, s.end_t, s.recovered, s.recovered_at, "
        "s.latency, s.fatal FROM error_spells s JOIN trajectories tr USING (traj_id) "
        "ORDER BY tr.task_id, tr.sample, s.start_t"
    ).fetchall():
        spells[(row[0], row[1])].append(row[2:])
    recoveries = defaultdict(dict)
    for task, sample, t, start in con.execute(
        "SELECT tr.task_id, tr.sample, u.t, u.recovery_of FROM turns u "
        "JOIN trajectories tr USING (traj_id) WHERE u.recovery_of IS NOT NULL"
    ).fetchall():
        recoveries[(task, sample)][t] = start
    for k, pattern in enumerate(patterns):
        for j, outcome in enumerate(outcomes):
            expected = _reference_spells(pattern, outcome)
            assert spells[(f"p{k}", j)] == expected, (pattern, outcome)
            assert recoveries[(f"p{k}", j)] == {s[3]: s[0] for s in expected if s[2]}


def test_rebuild_spells_follows_hand_edited_marks(con, memory_store):
    turns = [_ok(1), _ok(2), _ok(3), _ok(4)]
    memory_store.ingest_trajectories([_traj("a", turns)])
    tid = _only_traj_id(con)
    assert _spells(con, tid) == []
    con.execute("UPDATE turns SET error_kind = 'manual', is_error = true WHERE t IN (2, 3)")
    memory_store.rebuild_spells()
    assert _spells(con, tid) == [(2, 3, True, 4, 2, False)]
    assert con.execute("SELECT recovery_of FROM turns WHERE t = 4").fetchone()[0] == 2


# --------------------------------------------------------------------------------------------
# Precedence, repeat, labels, PRM


def test_explicit_mark_wins_over_rules(con, memory_store):
    turns = [Turn(action="a()", observation="Error: boom", error="timeout")]
    memory_store.ingest_trajectories([_traj("a", turns)])
    assert _kinds(con) == ["timeout"]


def test_labelled_below_zero_and_precedence_over_rules(con, memory_store):
    turns = [
        Turn(action="a()", observation="ok", label=-0.5),
        Turn(action="b()", observation="ok", label=0.0),
        Turn(action="c()", observation="Error: boom", label=-1.0),
        Turn(action="d()", observation="ok", label=0.46),
    ]
    memory_store.ingest_trajectories([_traj("a", turns)])
    assert _kinds(con) == ["labelled", None, "labelled", None]


def test_rule_marks_leave_labels_out_and_write_nothing(con, memory_store):
    from recovery.marking import rule_marks

    turns = [
        Turn(action="a()", observation="ok", label=-0.5),
        Turn(action="c()", observation="Error: boom", label=-1.0),
        Turn(action="c()", observation="Error: boom", label=0.5),
        Turn(action="e()", observation="fine", error="timeout"),
    ]
    memory_store.ingest_trajectories([_traj("a", turns)])
    traj_id = _only_traj_id(con)
    marks = rule_marks(con, [traj_id])
    assert marks["t"].tolist() == [1, 2, 3, 4]
    assert marks["kind"].tolist() == [None, "tool_error", "tool_error", "timeout"]
    assert _kinds(con) == ["labelled", "labelled", "tool_error", "timeout"]  # unchanged
    assert rule_marks(con, ["no-such-trajectory"]).empty


def test_repeat_needs_same_action_and_same_observation(con, memory_store):
    turns = [
        Turn(action="search(q=1)", observation="no results"),
        Turn(action="search(q=1)", observation="no results"),   # repeat
        Turn(action="search(q=1)", observation="3 results"),    # retry that now works
        Turn(action="open(3)", observation="page"),
        Turn(action="open(3)", observation="Error: gone"),      # same action, new answer
        Turn(action="open(3)", observation="Error: gone"),      # repeat, but content wins
    ]
    memory_store.ingest_trajectories([_traj("a", turns)])
    assert _kinds(con) == [None, "repeat", None, None, "tool_error", "tool_error"]
    assert _spells(con, _only_traj_id(con))[0][:4] == (2, 2, True, 3)


def test_prm_scores_below_threshold_mark_prm_errors_last(con, memory_store):
    turns = [_ok(1), _ok(2), Turn(action="x()", observation="Error: no"), _ok(4)]
    memory_store.ingest_trajectories([_traj("a", turns)])
    tid = _only_traj_id(con)
    con.executemany(
        "INSERT INTO step_scores VALUES (?, ?, ?, ?)",
        [(tid, 1, "m", 0.9), (tid, 2, "m", 0.2), (tid, 3, "m", 0.1), (tid, 4, "other", 0.0)],
    )
    assert memory_store.mark() == {"tool_error": 1}
    counts = memory_store.mark(prm_model="m", prm_threshold=0.5)
    assert counts == {"prm": 1, "tool_error": 1}
    assert _kinds(con) == [None, "prm", "tool_error", None]
    assert memory_store.mark(prm_model="m", prm_threshold=0.1) == {"tool_error": 1}


# --------------------------------------------------------------------------------------------
# User rules


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_user_rule_file_adds_a_kind_that_shows_up_in_spells(con, memory_store, tmp_path):
    rules = load_rules(_write(tmp_path / "rules.toml", """
[[rule]]
name = "rate limit"
kind = "rate_limit"
field = "observation"
pattern = "rate limit|quota exceeded"
flags = "i"

[[rule]]
name = "slow step"
kind = "slow"
field = "meta.latency_ms"
gt = 5000
"""))
    turns = [
        _ok(1),
        Turn(action="call()", observation="429: Rate limit reached, retry later"),
        _ok(3),
        Turn(action="call()", observation="done", meta={"latency_ms": 9000}),
        Turn(action="call()", observation="done again", meta={"latency_ms": 10}),
    ]
    memory_store.ingest_trajectories([_traj("a", turns)], options=IngestOptions(rules=rules))
    assert _kinds(con) == [None, "rate_limit", None, "slow", None]
    kinds = [r[0] for r in con.execute("SELECT kind FROM error_spells ORDER BY start_t").fetchall()]
    assert kinds == ["rate_limit", "slow"]


def test_user_rules_come_before_builtin_and_none_silences_them(con, memory_store, tmp_path):
    rules = load_rules(_write(tmp_path / "r.toml", """
[[rule]]
kind = "quota"
field = "observation"
startswith = "Error: quota"

[[rule]]
name = "benign"
kind = "none"
field = "observation"
contains = "Error: expected in tests"
"""))
    turns = [
        Turn(action="a()", observation="Error: quota exhausted"),
        Turn(action="b()", observation="Error: expected in tests"),
        Turn(action="c()", observation="Error: real"),
        Turn(action="c()", observation="Error: real", error="explicit_kind"),
    ]
    memory_store.ingest_trajectories([_traj("a", turns)], options=IngestOptions(rules=rules))
    assert _kinds(con) == ["quota", None, "tool_error", "explicit_kind"]


def test_builtin_false_and_repeat_false_switch_them_off(con, memory_store, tmp_path):
    rules = load_rules(_write(tmp_path / "r.toml", "builtin = false\nrepeat = false\n"))
    turns = [Turn(action="a()", observation="Error: x"), Turn(action="a()", observation="Error: x")]
    memory_store.ingest_trajectories([_traj("a", turns)], options=IngestOptions(rules=rules))
    assert _kinds(con) == [None, None]
    memory_store.mark()
    assert _kinds(con) == ["tool_error", "tool_error"]


def test_json_path_rules_and_format_limits(con, memory_store, tmp_path):
    chat = tmp_path / "chat.jsonl"
    record = {
        "task_id": "t1",
        "success": False,
        "messages": [
            {"role": "user", "content": "Error: my card was declined, can you help?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "pay", "arguments": "{\"amount\": 5}"}}]},
            {"role": "tool", "tool_call_id": "c1", "name": "pay", "content": "STATUS 402 declined"},
            {"role": "assistant", "content": "Sorry about that."},
            {"role": "user", "content": "Error: still broken. Invalid action by you!"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c2", "type": "function",
                 "function": {"name": "pay", "arguments": "{\"amount\": 6}"}}]},
            {"role": "tool", "tool_call_id": "c2", "name": "pay",
             "content": "Traceback (most recent call last):\n  ...\nKeyError: 'card'"},
        ],
    }
    chat.write_text(json.dumps(record) + "\n")
    rules = load_rules(_write(tmp_path / "r.toml", """
[[rule]]
name = "declined payment"
kind = "payment_declined"
field = "observation_json[role=tool].content"
pattern = "^STATUS 40[0-9]"
formats = ["openai"]

[[rule]]
name = "never for chat"
kind = "wrong"
field = "action_json[*].arguments.amount"
equals = 5
formats = ["canonical"]
"""))
    memory_store.ingest_file(chat, IngestOptions(rules=rules))
    assert con.execute("SELECT DISTINCT format FROM trajectories").fetchone()[0] == "openai"
    # The user's "Error: ..." and "Invalid action" are never read by the built-in rules.
    assert _kinds(con) == ["payment_declined", None, "tool_error"]


def test_inspect_structured_tool_errors(con, memory_store, tmp_path):
    def tool_msg(error: dict | None, content: str = "") -> dict:
        msg = {"role": "tool", "function": "bash", "content": content, "tool_call_id": "x"}
        if error:
            msg["error"] = error
        return msg

    def call(args: dict, parse_error: str | None = None) -> dict:
        tc = {"id": "x", "function": "bash", "arguments": args}
        if parse_error:
            tc["parse_error"] = parse_error
        return {"role": "assistant", "content": "", "tool_calls": [tc]}

    messages = [
        {"role": "user", "content": "do it"},
        call({"cmd": "sleep 99"}), tool_msg({"type": "timeout", "message": "timed out"}),
        call({"cmd": "ls"}), tool_msg(None, "a b c"),
        call({"cmd": "x"}), tool_msg({"type": "parsing", "message": "bad args"}),
        call({"cmd": "rm -rf"}), tool_msg({"type": "approval", "message": "rejected"}),
        call({"cmd": "cat f"}), tool_msg({"type": "file_not_found", "message": "no f"}),
        call({}, parse_error="Expecting value: line 1"), tool_msg(None, "hm"),
    ]
    log = {
        "version": 2,
        "status": "success",
        "eval": {"task": "demo", "model": "mock/model"},
        "samples": [{"id": 1, "epoch": 1, "messages": messages,
                     "scores": {"match": {"value": "I"}}}],
    }
    path = tmp_path / "log.json"
    path.write_text(json.dumps(log))
    memory_store.ingest_file(path)
    assert con.execute("SELECT DISTINCT format FROM trajectories").fetchone()[0] == "inspect"
    assert _kinds(con) == [
        "timeout", None, "parse_error", "invalid_action", "tool_error", "parse_error",
    ]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('[[rule]]\nname = "bad"\nkind = "x"\nfield = "observation"\npattern = "(unclosed"\n',
         "rule 1 ('bad'): bad regular expression"),
        ('[[rule]]\nkind = "x"\nfield = "observatoin"\ncontains = "a"\n',
         "rule 1: unknown field 'observatoin'"),
        ('[[rule]]\nkind = "x"\nfield = "observation"\n', "give at least one of"),
        ('[[rule]]\nkind = "x"\nfield = "meta..a"\nexists = true\n', "cannot read the path"),
        ('[[rule]]\nkind = "x"\nfield = "observation"\ncontains = "a"\ncolour = 1\n',
         "unknown key(s) colour"),
        ('[[rule]]\nkind = "x"\nfield = "observation"\npattern = "a"\nflags = "q"\n', "'flags'"),
        ('[[rule]]\nkind = "two words"\nfield = "observation"\ncontains = "a"\n', "'kind'"),
        ('[[rule]]\nkind = "x"\nfield = "observation"\nlt = "3"\n', "'lt' must be a number"),
        ('rule = 3\n', "array of tables"),
        ('[[rule]\n', "not valid TOML"),
        ('[[rule]]\nkind = "a"\nfield = "observation"\ncontains = "a"\n'
         '[[rule]]\nname = "second"\nkind = "b"\nfield = "observation"\npattern = "a{2,1}"\n',
         "rule 2 ('second'): bad regular expression"),
    ],
)
def test_bad_rule_files_name_file_and_rule(tmp_path, text, fragment):
    path = _write(tmp_path / "bad.toml", text)
    with pytest.raises(RuleError) as info:
        load_rules(path)
    message = str(info.value)
    assert str(path) in message
    assert fragment in message


def test_missing_rule_file_is_a_rule_error(tmp_path):
    with pytest.raises(RuleError, match="no such rules file"):
        load_rules(tmp_path / "absent.toml")


def test_builtin_rules_load_and_are_ordered_format_sets_first():
    rules = builtin_rules()
    sources = [r.source for r in rules]
    assert sources[0].endswith("taubench.toml")
    assert sources[-1].endswith("generic.toml")
    assert all(isinstance(r, Rule) for r in rules)
    assert {r.kind for r in rules} <= {"tool_error", "invalid_action", "parse_error", "timeout"}


def test_generic_rules_on_typical_error_texts(con, memory_store):
    cases = {
        "Traceback (most recent call last):\n  File x\nValueError: bad": "tool_error",
        "ValueError: invalid literal for int()": "tool_error",
        "requests.exceptions.ConnectionError: refused": "tool_error",
        "ERROR: disk full": "tool_error",
        "Error: could not parse the tool call": "parse_error",
        "JSONDecodeError: Expecting value": "parse_error",
        "Invalid action: go north": "invalid_action",
        "Nothing happens.": "invalid_action",
        "Unknown tool 'frobnicate'": "invalid_action",
        "TimeoutError: read timed out": "timeout",
        "Error: the command timed out after 30 s": "timeout",
        "Request timed out": "timeout",
        "The error rate is 3% and nothing happens until noon.": None,
        "Found 3 records; invalid entries were skipped.": None,
        "status: ok (no error)": None,
    }
    turns = [Turn(action=f"step({i})", observation=text) for i, text in enumerate(cases)]
    memory_store.ingest_trajectories([_traj("a", turns)])
    assert _kinds(con) == list(cases.values())


def test_rule_from_dict_accepts_a_list_of_fields():
    rule = rule_from_dict({"kind": "k", "field": ["action", "observation"], "contains": "x"})
    assert rule.field == ("action", "observation")


# --------------------------------------------------------------------------------------------
# Idempotence and scope


def test_remarking_is_idempotent_and_scoped(con, memory_store, tmp_path):
    a = _traj("a", [_ok(1), Turn(action="x()", observation="Error: boom"), _ok(3)], sample=0)
    b = _traj("b", [_ok(1), Turn(action="x()", observation="Error: boom"), _ok(3)], sample=0)
    memory_store.ingest_trajectories([a, b])
    before = con.execute("SELECT * FROM turns ORDER BY traj_id, t").fetchall()
    spells_before = con.execute("SELECT * FROM error_spells ORDER BY traj_id").fetchall()
    assert memory_store.mark() == {"tool_error": 2}
    assert con.execute("SELECT * FROM turns ORDER BY traj_id, t").fetchall() == before
    assert con.execute("SELECT * FROM error_spells ORDER BY traj_id").fetchall() == spells_before

    only_a = con.execute("SELECT traj_id FROM trajectories WHERE task_id = 'a'").fetchone()[0]
    only_b = con.execute("SELECT traj_id FROM trajectories WHERE task_id = 'b'").fetchone()[0]
    silence = RuleSet(rules=[Rule(kind="none", field="observation", startswith="Error:")])
    assert memory_store.mark(silence, traj_ids=[only_a]) == {}
    assert _kinds(con, only_a) == [None, None, None]
    assert _spells(con, only_a) == []
    assert con.execute("SELECT count(*) FROM turns WHERE recovery_of IS NOT NULL "
                        "AND traj_id = ?", [only_a]).fetchone()[0] == 0
    # b untouched
    assert _kinds(con, only_b) == [None, "tool_error", None]
    assert _spells(con, only_b) == [(2, 2, True, 3, 1, False)]
    # and back
    memory_store.mark()
    assert con.execute("SELECT * FROM turns ORDER BY traj_id, t").fetchall() == before


def test_ingest_marks_only_the_new_file(con, memory_store, tmp_path):
    first = tmp_path / "one.jsonl"
    first.write_text(json.dumps({"task_id": "a", "success": False, "turns": [
        {"action": "x", "observation": "Error: 1"}]}) + "\n")
    memory_store.ingest_file(first)
    con.execute("UPDATE turns SET error_kind = 'kept', is_error = true")
    second = tmp_path / "two.jsonl"
    second.write_text(json.dumps({"task_id": "b", "success": False, "turns": [
        {"action": "x", "observation": "Error: 2"}]}) + "\n")
    memory_store.ingest_file(second)
    assert sorted(_kinds(con)) == ["kept", "tool_error"]


# --------------------------------------------------------------------------------------------
# Simulator ground truth


@pytest.fixture(scope="module")
def sim_store():
    from recovery.simulate import PRESETS, SimConfig

    store = simulated_store(SimConfig(
        policies={"base": PRESETS["base"], "rl": PRESETS["rl"]},
        n_tasks=60, n_samples=6, budgets=[30], seed=3,
    ))
    yield store.con
    store.close()


def test_simulator_visible_errors_are_marked_with_their_true_kind_and_nothing_else(sim_store):
    con = sim_store
    rows = con.execute(
        """
        SELECT meta->>'$.true_error' AS truth, meta->>'$.true_kind' AS kind, error_kind,
               count(*)
        FROM turns GROUP BY ALL
        """
    ).fetchall()
    visible = {(k, e): n for truth, k, e, n in rows if truth == "visible"}
    assert visible and all(k == e for k, e in visible)  # recall and kind
    others = {(truth, e): n for truth, _, e, n in rows if truth != "visible"}
    assert all(e is None for _, e in others)  # precision: silent and clean turns unmarked
    assert any(truth == "silent" for truth, _ in others)


def test_simulator_spells_recoveries_and_latencies_equal_ground_truth(sim_store):
    con = sim_store
    truth = con.execute(
        """
        WITH visible_spells AS (
            SELECT traj_id, (meta->>'$.spell_start')::INT AS start_t, max(t) AS end_t
            FROM turns WHERE meta->>'$.true_error' = 'visible'
            GROUP BY traj_id, start_t
        ),
        recoveries AS (
            SELECT traj_id, (meta->>'$.recovers')::INT AS start_t, t AS recovered_at
            FROM turns WHERE meta->>'$.recovers' IS NOT NULL
        )
        SELECT v.traj_id, v.start_t, v.end_t, r.recovered_at IS NOT NULL, r.recovered_at,
               r.recovered_at - v.start_t
        FROM visible_spells v LEFT JOIN recoveries r USING (traj_id, start_t)
        ORDER BY ALL
        """
    ).fetchall()
    marked = con.execute(
        "SELECT traj_id, start_t, end_t, recovered, recovered_at, latency FROM error_spells "
        "ORDER BY ALL"
    ).fetchall()
    assert len(truth) > 50
    assert marked == truth
    fatal = con.execute(
        "SELECT traj_id FROM error_spells WHERE fatal ORDER BY traj_id"
    ).fetchall()
    fatal_truth = con.execute(
        """
        SELECT tr.traj_id FROM trajectories tr JOIN turns u
            ON u.traj_id = tr.traj_id AND u.t = tr.n_turns
        WHERE NOT tr.success AND u.meta->>'$.true_error' = 'visible'
        ORDER BY tr.traj_id
        """
    ).fetchall()
    assert fatal and fatal == fatal_truth


def test_every_simulator_error_template_gets_its_kind(con, memory_store):
    from collections import defaultdict

    from recovery.simulate import VISIBLE_ERROR_TEMPLATES

    values = defaultdict(lambda: "x7", noun="order", wrong="W-123", tool="get_order_details",
                         arg="order_id", line=42, code=503, req="0a1b2c", bad_tool="update_order",
                         reason="not allowed now", head="get_order_details order_", col=17)
    turns, expected = [], []
    for kind, templates in VISIBLE_ERROR_TEMPLATES.items():
        for i, template in enumerate(templates):
            turns.append(Turn(action=f"{kind}({i})", observation=template.format_map(values)))
            expected.append(kind)
    memory_store.ingest_trajectories([_traj("a", turns)])
    assert _kinds(con) == expected


# --------------------------------------------------------------------------------------------
# CLI


def test_cli_mark_prints_counts_and_rejects_bad_rules(tmp_path):
    from agent_recovery_cli.recovery import main

    store = tmp_path / "s.duckdb"
    con = open_store(store)
    con.ingest_trajectories([_traj("a", [
        _ok(1), Turn(action="x()", observation="Error: no"), _ok(3),
        Turn(action="y()", observation="quota exceeded"),
    ])])
    con.close()
    runner = CliRunner()
    result = runner.invoke(main, ["mark", "--store", str(store)])
    assert result.exit_code == 0, result.output
    assert "tool_error  1 turns" in result.output
    assert "spells: 1 (1 recovered, 0 fatal)" in result.output

    rules = _write(tmp_path / "rules.toml",
                   '[[rule]]\nkind = "quota"\nfield = "observation"\ncontains = "quota"\n')
    result = runner.invoke(main, ["mark", "--store", str(store), "--rules", str(rules)])
    assert result.exit_code == 0, result.output
    assert "quota" in result.output and "spells: 2 (1 recovered, 1 fatal)" in result.output

    bad = _write(tmp_path / "bad.toml",
                 '[[rule]]\nname = "b"\nkind = "k"\nfield = "nope"\ncontains = "x"\n')
    result = runner.invoke(main, ["mark", "--store", str(store), "--rules", str(bad)])
    assert result.exit_code == 2
    assert "bad.toml: rule 1 ('b'): unknown field 'nope'" in result.output
    check = open_store(store, read_only=True)
    try:  # the failed run changed nothing
        assert check.con.execute("SELECT count(*) FROM error_spells").fetchone()[0] == 2
    finally:
        check.close()


def test_rule_marks_on_monte_carlo_labelled_runs_equal_marking_without_labels():
    import dataclasses

    from recovery.marking import rule_marks
    from recovery.simulate import SimConfig

    plain = SimConfig(n_tasks=20, n_samples=3, budgets=[20], seed=4)
    unlabelled = simulated_store(plain)
    labelled = simulated_store(dataclasses.replace(plain, mc_rollouts=8))
    assert labelled.con.execute("SELECT count(*) FROM turns WHERE error_kind = 'labelled'").fetchone()[0]
    ids = [r[0] for r in labelled.con.execute("SELECT traj_id FROM trajectories").fetchall()]
    marks = rule_marks(labelled.con, ids)
    expected = unlabelled.con.execute("SELECT traj_id, t, error_kind FROM turns ORDER BY ALL").fetchall()
    assert list(marks.itertuples(index=False, name=None)) == expected
