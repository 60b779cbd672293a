"""The sibling features computed with array operations (prm.data.siblings) equal the loops they
replaced (kept here as the reference) on random frames, read at most 64 siblings for the
similarity, and cost time linear in the samples of a task."""

from __future__ import annotations

import random
import time

import numpy as np
import pandas as pd
import pytest

from prm.data import features as F
from prm.data.siblings import MAX_SIMILARITY_SIBLINGS, normalise_answer


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def reference_sibling_features(frame: pd.DataFrame, setting: str) -> dict[str, np.ndarray]:
    """prm.data.features.sibling_features as it was: loops over every pair of siblings."""
    n = len(frame)
    names = ["sib_agree_final", "sib_similarity_final", "sib_same_turn", "sib_log_turns",
             "log_t_over_siblings"]
    if setting == "hindsight":
        names += ["own_final_agree", "sib_success_rate"]
    out = {name: np.full(n, np.nan) for name in names}
    out["log_siblings"] = np.zeros(n)
    answers = np.array([normalise_answer(a) for a in frame["action"]], dtype=object)
    words = [frozenset(a.split()) for a in answers]
    traj = frame["traj_id"].to_numpy()
    turn = frame["t"].to_numpy(np.int64)
    outcome = frame["success"].astype("float64").to_numpy()
    for group in frame.groupby(["run", "task_id"], sort=False).indices.values():
        rows: dict[str, list[int]] = {}
        for i in sorted(group, key=lambda i: (traj[i], turn[i])):
            rows.setdefault(traj[i], []).append(int(i))
        if len(rows) < 2:
            continue
        final = {k: v[-1] for k, v in rows.items()}
        by_turn = {k: {int(turn[i]): answers[i] for i in v} for k, v in rows.items()}
        for k, idx in rows.items():
            others = [o for o in rows if o != k]
            finals = [answers[final[o]] for o in others]
            final_words = [words[final[o]] for o in others]
            known = [outcome[rows[o][0]] for o in others
                     if outcome[rows[o][0]] == outcome[rows[o][0]]]
            own = np.mean([f == answers[final[k]] for f in finals])
            sib_log_turns = np.mean([np.log1p(len(rows[o])) for o in others])
            for i in idx:
                out["sib_agree_final"][i] = np.mean([f == answers[i] for f in finals])
                out["sib_similarity_final"][i] = np.mean(
                    [_jaccard(words[i], w) for w in final_words])
                same = [by_turn[o][turn[i]] == answers[i] for o in others
                        if turn[i] in by_turn[o]]
                out["sib_same_turn"][i] = np.mean(same) if same else np.nan
                out["sib_log_turns"][i] = sib_log_turns
                out["log_t_over_siblings"][i] = np.log1p(turn[i]) - sib_log_turns
                out["log_siblings"][i] = np.log1p(len(others))
                if setting == "hindsight":
                    out["own_final_agree"][i] = own
                    out["sib_success_rate"][i] = np.mean(known) if known else np.nan
    return out


WORDS = ["Paris", "paris.", "Lyon", "search(q='x')", "the", "answer", "is", "", "  ", "42",
         "Tokyo!", "no"]


def random_frame(rng: random.Random, n_tasks: int = 4, max_k: int = 6) -> pd.DataFrame:
    """Turn rows of a few runs and tasks, 1..max_k samples each, in shuffled row order; actions
    drawn from a small vocabulary (so that answers and words repeat), some empty; outcomes
    true, false or unknown."""
    rows = []
    for task in range(n_tasks):
        run = rng.choice(["p", "q"])
        for sample in range(rng.randint(1, max_k)):
            traj = f"{rng.getrandbits(32):08x}-{task}-{sample}"
            n_turns = rng.randint(1, 5)
            success = rng.choice([True, False, None])
            for t in range(1, n_turns + 1):
                action = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 3)))
                rows.append({"traj_id": traj, "run": run, "task_id": f"task{task}", "t": t,
                             "n_turns": n_turns, "success": success, "action": action})
    rng.shuffle(rows)
    return pd.DataFrame(rows, columns=["traj_id", "run", "task_id", "t", "n_turns", "success",
                                       "action"])


def assert_same(new: dict[str, np.ndarray], old: dict[str, np.ndarray]) -> None:
    assert list(new) == list(old)
    for name in old:
        np.testing.assert_allclose(new[name], old[name], rtol=1e-12, atol=1e-12,
                                   equal_nan=True, err_msg=name)


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("setting", ["blind", "hindsight"])
def test_vectorised_siblings_equal_the_loops_on_random_frames(seed: int, setting: str) -> None:
    frame = random_frame(random.Random(seed))
    assert_same(F.sibling_features(frame, setting), reference_sibling_features(frame, setting))


def test_empty_and_single_sample_frames() -> None:
    empty = random_frame(random.Random(0)).iloc[:0]
    for setting in ("blind", "hindsight"):
        assert_same(F.sibling_features(empty, setting),
                    reference_sibling_features(empty, setting))
    one = random_frame(random.Random(1), n_tasks=1, max_k=1)
    out = F.sibling_features(one, "hindsight")
    assert np.isnan(out["sib_agree_final"]).all() and (out["log_siblings"] == 0).all()


def test_up_to_64_siblings_the_similarity_is_exact() -> None:
    frame = pd.concat([random_frame(random.Random(s), n_tasks=1, max_k=1)
                       for s in range(MAX_SIMILARITY_SIBLINGS + 1)], ignore_index=True)
    frame["task_id"], frame["run"] = "t", "p"
    assert frame["traj_id"].nunique() == MAX_SIMILARITY_SIBLINGS + 1
    assert_same(F.sibling_features(frame, "blind"), reference_sibling_features(frame, "blind"))


def test_above_64_siblings_the_similarity_reads_64_of_them() -> None:
    frame = pd.concat([random_frame(random.Random(s), n_tasks=1, max_k=1)
                       for s in range(100)], ignore_index=True)
    frame["task_id"], frame["run"] = "t", "p"
    new = F.sibling_features(frame, "hindsight")
    old = reference_sibling_features(frame, "hindsight")
    for name in old:  # every other feature stays exact
        if name != "sib_similarity_final":
            np.testing.assert_allclose(new[name], old[name], rtol=1e-12, equal_nan=True)
    # the similarity is the reference's on the 65 trajectories of smallest id (64 siblings
    # each; those past them read the first 64)
    read = sorted(frame["traj_id"].unique())[:MAX_SIMILARITY_SIBLINGS + 1]
    inside = frame[frame["traj_id"].isin(read)].reset_index(drop=True)
    expected = reference_sibling_features(inside, "blind")["sib_similarity_final"]
    mask = frame["traj_id"].isin(read).to_numpy()
    np.testing.assert_allclose(new["sib_similarity_final"][mask], expected, rtol=1e-12)
    outside = frame[~mask].iloc[:8]
    first = frame[frame["traj_id"].isin(read[:MAX_SIMILARITY_SIBLINGS])]
    for i, row in outside.iterrows():
        probe = pd.concat([first, row.to_frame().T], ignore_index=True)
        value = reference_sibling_features(probe, "blind")["sib_similarity_final"][-1]
        assert new["sib_similarity_final"][i] == pytest.approx(value, rel=1e-12)


def same_prompt_frame(k: int, n_turns: int = 8, seed: int = 0) -> pd.DataFrame:
    """``k`` samples of one task (conversations that share a prompt), ``n_turns`` turns each."""
    rng = random.Random(seed)
    rows = [{"traj_id": f"{s:06d}", "run": "p", "task_id": "prompt-x", "t": t,
             "n_turns": n_turns, "success": rng.random() < 0.4,
             "action": " ".join(rng.choice(WORDS) for _ in range(3)) + f" {rng.randint(0, 99)}"}
            for s in range(k) for t in range(1, n_turns + 1)]
    return pd.DataFrame(rows)


def test_cost_grows_linearly_with_the_samples_of_a_task() -> None:
    def seconds(k: int) -> float:
        frame = same_prompt_frame(k)
        best = float("inf")
        for _ in range(3):
            began = time.process_time()
            F.sibling_features(frame, "hindsight")
            best = min(best, time.process_time() - began)
        return best

    small, large = seconds(300), seconds(1200)
    assert large / small < 6, (small, large)


def test_step_features_say_when_the_similarity_reads_a_sample() -> None:
    many = same_prompt_frame(MAX_SIMILARITY_SIBLINGS + 2, n_turns=2)
    for column, value in {"n_turns": 2, "success_turn": np.nan, "observation": "",
                          "is_tool": False, "is_error": False, "error_kind": None}.items():
        many[column] = value
    notes = F.step_features(many, "blind").notes
    assert any("reads 64 siblings" in note for note in notes)
    few = many[many["traj_id"] <= f"{MAX_SIMILARITY_SIBLINGS:06d}"]
    assert not any("reads 64 siblings" in note for note in F.step_features(few, "blind").notes)
