"""The episode: per-turn draws, the event each turn makes, the text it writes, the truth."""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from recovery.schema import Trajectory, Turn
from recovery.simulate.params import EpisodeDynamics, PolicyParams, SimConfig, SimPolicy
from recovery.simulate.tasks import SimTask, near_miss, new_id, turn_probabilities
from recovery.simulate.text import (
    DOMAIN_SPECS,
    INVALID_REASONS,
    LOOKUP_OK,
    MESSAGES,
    MUTATE_OK,
    POLICY_TEXTS,
    RECHECK_OBS,
    RECONCILE_AMOUNT,
    RECONCILE_ID,
    STATUS_OBS,
    STATUSES,
    THINK_OBS,
    THOUGHTS,
    USER_REPLIES,
    VISIBLE_ERROR_TEMPLATES,
    VISIBLE_KINDS,
    Tool,
)

# --------------------------------------------------------------------------------------------
# Episodes.

_TOKEN_RE = re.compile(r"#?\w+")
_ROWS = 64
_MASK64 = (1 << 64) - 1
_UNIT = 2.0**-53


def _turn_draws(seed: int, task_index: int, sample: int) -> Iterator[tuple[float, float, int]]:
    """One row of random numbers per turn: two uniforms in [0, 1) and one 64-bit integer."""
    bits = np.random.PCG64([seed, 2, task_index, sample])
    while True:
        for w0, w1, w2 in bits.random_raw((_ROWS, 3)).tolist():
            yield (w0 >> 11) * _UNIT, (w1 >> 11) * _UNIT, w2


class _Pick:
    """Small random choices from one seed: digits of a big integer, refilled by splitmix64."""

    __slots__ = ("state", "value")

    def __init__(self, value: int):
        self.state = value & _MASK64
        self.value = value

    def __call__(self, n: int) -> int:
        if self.value < n << 16:
            z = self.state = (self.state + 0x9E3779B97F4A7C15) & _MASK64
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
            self.value = z ^ (z >> 31)
        self.value, r = divmod(self.value, n)
        return r


def _call(name: str, args: list[tuple[str, str | int]]) -> str:
    parts = [f'{k}="{v}"' if isinstance(v, str) else f"{k}={v}" for k, v in args]
    return f"{name}({', '.join(parts)})"


class _Episode:
    """The text side of one episode: turns the events into actions and observations."""

    def __init__(self, task: SimTask, progress_texts: dict[int, tuple[str, str]]):
        self.task = task
        self.progress_texts = progress_texts
        self.domain = DOMAIN_SPECS[task.domain]
        self.noun = self.domain.noun
        self.turns: list[Turn] = []
        # The current spell's text state.
        self.visible_turn: tuple[str, str] | None = None
        self.silent_flavour = ""
        self.silent_wrong: str | int = ""
        self.fake_ids: set[str] = set()
        self._seen = set(_TOKEN_RE.findall(task.prompt))
        self._seen_turns = 0

    def seen_tokens(self) -> set[str]:
        """Every token (ids, numbers, words) of the prompt and the observations so far."""
        for turn in self.turns[self._seen_turns :]:
            self._seen.update(_TOKEN_RE.findall(turn.observation))
        self._seen_turns = len(self.turns)
        return self._seen

    # --- pieces -----------------------------------------------------------------------------
    def _args(self, step: int, ident: str, amount: int) -> list[tuple[str, str | int]]:
        tool = self.domain.tools[self.task.tools[step]]
        args: list[tuple[str, str | int]] = [(self.domain.id_arg, ident)]
        args.extend(
            (name, value) for (name, _), value in zip(tool.extra, self.task.extras[step], strict=True)
        )
        if tool.amount:
            args.append(("amount", amount))
        return args

    def _ok_obs(self, tool: Tool, template: int, next_id: str, amount: int, pick: _Pick) -> str:
        templates = LOOKUP_OK if tool.kind == "lookup" else MUTATE_OK
        return templates[template].format(
            Noun=self.noun.capitalize(),
            noun=self.noun,
            next=next_id,
            amount=amount,
            status=STATUSES[pick(len(STATUSES))],
            count=1 + pick(5),
            date=f"2024-{1 + pick(12):02d}-{1 + pick(28):02d}",
            time=f"{pick(24):02d}:{pick(60):02d}",
            verb=tool.verb,
            Verb=tool.verb.capitalize(),
        )

    def _fake_id(self, value: int) -> str:
        while True:
            ident = new_id(self.domain.id_style, value)
            if ident not in self.task.ids:
                self.fake_ids.add(ident)
                return ident
            value = value // 7 + 12345

    # --- turns ------------------------------------------------------------------------------
    def progress(self, step: int, note: str = "") -> tuple[str, str]:
        """Step ``step`` done right; its observation reveals the next id and amount."""
        cached = self.progress_texts.get(step)
        if cached is not None:
            return cached[0], note + cached[1]
        task = self.task
        tool = self.domain.tools[task.tools[step]]
        action = _call(tool.name, self._args(step, task.ids[step], task.amounts[step]))
        nxt = step + 1
        obs = self._ok_obs(tool, task.templates[step], task.ids[nxt], task.amounts[nxt],
                           _Pick(task.details[step]))
        self.progress_texts[step] = (action, obs)
        return action, note + obs

    def recheck(self, step: int, pick: _Pick, note: str = "") -> tuple[str, str]:
        """A lookup of the id step ``step`` needs, showing its amount (no progress)."""
        task = self.task
        ident = task.ids[step]
        lookup = self.domain.tools[0]
        action = _call(lookup.name, [(self.domain.id_arg, ident)])
        obs = RECHECK_OBS[pick(len(RECHECK_OBS))].format(
            Noun=self.noun.capitalize(), id=ident, amount=task.amounts[step],
            status=STATUSES[pick(len(STATUSES))],
        )
        return action, note + obs

    def stall(self, step: int, pick: _Pick) -> tuple[str, str]:
        """A clean turn that makes no progress; only uses what the history has shown."""
        task, domain = self.task, self.domain
        known = task.ids[pick(step + 1)]
        topic = domain.topics[pick(len(domain.topics))]
        kind = pick(4)
        if kind == 0:
            thought = THOUGHTS[pick(len(THOUGHTS))].format(noun=self.noun, topic=topic, id=known)
            return _call("think", [("thought", thought)]), THINK_OBS[pick(len(THINK_OBS))]
        if kind == 1:
            message = MESSAGES[pick(len(MESSAGES))].format(noun=self.noun, id=known)
            return _call("respond", [("message", message)]), USER_REPLIES[pick(len(USER_REPLIES))]
        if kind == 2:
            lookup = domain.tools[0]
            obs = STATUS_OBS[pick(len(STATUS_OBS))].format(
                Noun=self.noun.capitalize(), id=known, status=STATUSES[pick(len(STATUSES))],
                date=f"2024-{1 + pick(12):02d}-{1 + pick(28):02d}",
            )
            return _call(lookup.name, [(domain.id_arg, known)]), obs
        return (
            _call("search_policy", [("topic", topic)]),
            POLICY_TEXTS[pick(len(POLICY_TEXTS))].format(topic=topic),
        )

    def visible(self, step: int, kind: str, pick: _Pick) -> tuple[str, str]:
        """The first turn of a visible spell (later turns of the spell repeat it)."""
        task, domain = self.task, self.domain
        tool = domain.tools[task.tools[step]]
        right = task.ids[step]
        args = self._args(step, right, task.amounts[step])
        correct = _call(tool.name, args)
        variant = pick(len(VISIBLE_ERROR_TEMPLATES[kind]))
        template = VISIBLE_ERROR_TEMPLATES[kind][variant]
        if kind == "tool_error":
            if variant == 3:
                obs = template.format(tool=tool.name, code=(500, 502, 503, 504)[pick(4)],
                                      req=f"{pick(1 << 24):06x}")
                return correct, obs
            wrong = near_miss(right, pick(1 << 20))
            action = _call(tool.name, [(domain.id_arg, wrong), *args[1:]])
            return action, template.format(noun=self.noun, wrong=wrong, tool=tool.name,
                                           line=20 + pick(200), arg=domain.id_arg)
        if kind == "invalid_action":
            if variant == 0:
                missing = args[pick(len(args))]
                action = _call(tool.name, [a for a in args if a is not missing])
                return action, template.format(tool=tool.name, arg=missing[0])
            if variant == 1:
                bad = domain.bad_tools[pick(len(domain.bad_tools))]
                return _call(bad, [(domain.id_arg, right)]), template.format(bad_tool=bad)
            return correct, template.format(reason=INVALID_REASONS[pick(len(INVALID_REASONS))])
        # parse_error
        if variant == 0:
            action = correct[:-1]
            return action, template.format(col=len(action) + 1)
        if variant == 1:
            action = f"{tool.name} " + " ".join(f"{k}={v}" for k, v in args)
            return action, template.format(head=action[:24])
        inner = ", ".join(f"{k}: {v}" for k, v in args)
        action = f'{{"name": "{tool.name}", "arguments": {{{inner}}}}}'
        return action, template.format(col=action.index("{", 1) + 2)

    def silent(self, step: int, first: bool, pick: _Pick) -> tuple[str, str]:
        """A silent-error turn: a normal-looking call with an id or amount no earlier
        observation supports, answered by a normal-looking observation."""
        task, domain = self.task, self.domain
        seen = self.seen_tokens()
        if first:
            tool = domain.tools[task.tools[step]]
            self.silent_flavour = "amount" if tool.amount and pick(2) else "id"
        if self.silent_flavour == "id":
            wrong = "" if first else str(self.silent_wrong)
            while not wrong or wrong in seen or wrong in task.ids or wrong in self.fake_ids:
                wrong = near_miss(task.ids[step], pick(1 << 20))
            self.silent_wrong = wrong
            # The spell's later turns keep acting on the wrong id, with varied tools.
            k = task.tools[step] if first else pick(len(domain.tools))
            tool = domain.tools[k]
            if k == task.tools[step]:
                args = self._args(step, wrong, task.amounts[step])
            else:
                args = [(domain.id_arg, wrong)]
                args.extend((name, choices[pick(len(choices))]) for name, choices in tool.extra)
                if tool.amount:
                    args.append(("amount", task.amounts[step]))
        else:
            right = task.amounts[step]
            wrong_amount = right
            while wrong_amount == right or str(wrong_amount) in seen or wrong_amount <= 0:
                delta = (1 + pick(9)) * (10 if pick(2) else 1) * (1 if pick(2) else -1)
                wrong_amount = right + delta
            self.silent_wrong = wrong_amount
            tool = domain.tools[task.tools[step]]
            args = self._args(step, task.ids[step], wrong_amount)
        action = _call(tool.name, args)
        obs = self._ok_obs(tool, pick(len(LOOKUP_OK)), self._fake_id(pick(1 << 40)),
                           20 + pick(980), pick)
        return action, obs

    def reconcile_note(self, step: int, pick: _Pick) -> str:
        """What the recovery turn after a silent spell says about the mismatch."""
        if self.silent_flavour == "id":
            return RECONCILE_ID[pick(len(RECONCILE_ID))].format(
                wrong=self.silent_wrong, right=self.task.ids[step])
        return RECONCILE_AMOUNT[pick(len(RECONCILE_AMOUNT))].format(
            wrong=self.silent_wrong, right=self.task.amounts[step])


def run_episode(
    sim_policy: SimPolicy,
    config: SimConfig,
    task: SimTask,
    budget: int,
    sample: int,
    progress_texts: dict[int, tuple[str, str]],
) -> Trajectory:
    """One simulated episode of a policy on a task at a budget: its turns, each turn's meta holding
    the truth.

    Long because it is the simulator's turn loop: each turn takes its draws in a fixed order
    (which keeps the output byte-identical for a seed) and its events (progress, error, spell,
    recovery) share the loop's state.
    """
    name, policy, policy_dict = sim_policy.name, sim_policy.params, sim_policy.record
    draws = _turn_draws(config.seed, task.index, sample)
    episode = _Episode(task, progress_texts)
    turns = episode.turns
    task_params = config.tasks
    probs = turn_probabilities(policy, task_params, task.difficulty)
    hurry_probs = turn_probabilities(policy, task_params, task.difficulty, hurry=True)
    total_weight = sum(policy.kind_weights)
    kind_cut = [sum(policy.kind_weights[: i + 1]) / total_weight for i in range(2)]
    progress = 0
    spell_start: int | None = None
    spell_kind = ""
    end = "budget"
    # The hidden state after each turn: (progress, in a spell, episode over), for rollouts.
    after: list[tuple[int, bool, bool]] = []
    for t in range(1, budget + 1):
        u_event, u_sub, pick_seed = next(draws)
        pick = _Pick(pick_seed)
        hurry = policy.budget_aware and budget - t < policy.hurry_turns
        p_progress, p_error = hurry_probs if hurry else probs
        before = progress
        recovers: int | None = None
        if spell_start is None:
            if u_event < p_progress:
                event = "progress"
                action, obs = episode.progress(progress)
                progress += 1
            elif u_event < p_progress + p_error:
                event = "error"
                spell_start = t
                if u_sub < policy.p_silent:
                    spell_kind = "silent"
                    action, obs = episode.silent(progress, True, pick)
                else:
                    x = (u_sub - policy.p_silent) / (1.0 - policy.p_silent)
                    spell_kind = VISIBLE_KINDS[min(bisect.bisect_right(kind_cut, x), 2)]
                    action, obs = episode.visible(progress, spell_kind, pick)
                    episode.visible_turn = (action, obs)
            else:
                event = "stall"
                action, obs = episode.stall(progress, pick)
        else:
            if u_event < policy.p_recover:
                event = "recover"
                recovers = spell_start
                note = episode.reconcile_note(progress, pick) if spell_kind == "silent" else ""
                q = p_progress / (1.0 - p_error) if p_error < 1.0 else 0.0
                if u_sub < q:
                    action, obs = episode.progress(progress, note)
                    progress += 1
                else:
                    action, obs = episode.recheck(progress, pick, note)
            else:
                event = "fatal" if u_event < policy.p_recover + policy.p_fatal else "repeat"
                if spell_kind == "silent":
                    action, obs = episode.silent(progress, False, pick)
                else:
                    assert episode.visible_turn is not None
                    action, obs = episode.visible_turn
        is_error = event in ("error", "repeat", "fatal")
        if turns and not (is_error and spell_kind != "silent" and event != "error"):
            prev = turns[-1]
            tries = 0
            while action == prev.action and obs == prev.observation and tries < 8:
                # Only a repeated visible error may copy the previous turn (the repeat rule).
                tries += 1
                if event == "stall":
                    action, obs = episode.stall(before, pick)
                elif event in ("repeat", "fatal"):
                    action, obs = episode.silent(before, False, pick)
                else:  # pragma: no cover - progress/recover/error turns always differ
                    break
            if action == prev.action and obs == prev.observation:
                # The draws above ran out of variety (about once in a million turns); a clean
                # or silent turn must still never look like a repeat to the rules.
                obs = f"{obs} (as before)"
        meta: dict[str, Any] = {
            "true_error": (None if not is_error
                           else "silent" if spell_kind == "silent" else "visible"),
            "true_kind": spell_kind if is_error else None,
            "event": event,
            "spell_start": spell_start if is_error else None,
            "recovers": recovers,
            "progress_before": before,
            "progress_after": progress,
        }
        if policy.budget_aware:
            meta["hurry"] = hurry
        turns.append(Turn(action=action, observation=obs, meta=meta))
        if event == "recover":
            spell_start = None
            spell_kind = ""
            episode.visible_turn = None
        if progress >= task.length:
            end = "success"
        elif event == "fatal":
            end = "fatal"
        after.append((progress, spell_start is not None, end != "budget"))
        if end != "budget":
            break
    success = end == "success"
    if config.mc_rollouts:
        values = rollout_values(
            policy, EpisodeDynamics(probs, hurry_probs, task.length, budget), after,
            config.mc_rollouts, np.random.default_rng([config.seed, 3, task.index, sample, budget]),
        )
        for turn, value in zip(turns, values.tolist(), strict=True):
            turn.label = round(2.0 * value - 1.0, 6)
    return Trajectory(
        run=name,
        task_id=task.task_id,
        turns=turns,
        success=success,
        sample=sample,
        budget=budget,
        reward=1.0 if success else 0.0,
        prompt=task.prompt,
        meta={
            "policy": name,
            "params": policy_dict,
            "seed": config.seed,
            "task": {"length": task.length, "difficulty": task.difficulty,
                     "domain": task.domain},
            "end": end,
        },
    )


def rollout_values(
    policy: PolicyParams,
    dynamics: EpisodeDynamics,
    after: Sequence[tuple[int, bool, bool]],
    n_rollouts: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Monte Carlo value (in [0, 1]) of the state after each turn of one episode; ``after``
    holds, per turn ``t = 1..n``, ``(progress, in_spell, ended)`` after it.

    From that hidden state, ``n_rollouts`` continuations of the same policy run to success, a
    fatal turn or the budget, with the dynamics of the episode loop (text is irrelevant to the
    outcome, so it is not made); the value is their success rate. A turn that ended the
    episode has the value of its outcome. All continuations advance together.
    """
    probs, hurry_probs = dynamics.probs, dynamics.hurry_probs
    length, budget = dynamics.length, dynamics.budget
    n_turns = len(after)
    state = np.asarray(after, dtype=np.int64).reshape(n_turns, 3)
    turn = np.repeat(np.arange(1, n_turns + 1), n_rollouts)
    progress = np.repeat(state[:, 0], n_rollouts)
    in_spell = np.repeat(state[:, 1].astype(bool), n_rollouts)
    alive = ~np.repeat(state[:, 2].astype(bool), n_rollouts)
    won = progress >= length
    while True:
        turn = turn + 1
        alive &= turn <= budget
        if not alive.any():
            break
        hurry = policy.budget_aware & (budget - turn < policy.hurry_turns)
        p_progress = np.where(hurry, hurry_probs[0], probs[0])
        p_error = np.where(hurry, hurry_probs[1], probs[1])
        u_event = rng.random(turn.size)
        u_sub = rng.random(turn.size)
        clean = alive & ~in_spell
        spell = alive & in_spell
        recover = spell & (u_event < policy.p_recover)
        fatal = spell & ~recover & (u_event < policy.p_recover + policy.p_fatal)
        q = np.where(p_error < 1.0, p_progress / np.maximum(1.0 - p_error, 1e-300), 0.0)
        step = (clean & (u_event < p_progress)) | (recover & (u_sub < q))
        error = clean & (u_event >= p_progress) & (u_event < p_progress + p_error)
        progress = progress + step
        in_spell = (in_spell & ~recover) | error
        won |= alive & (progress >= length)
        alive &= ~(won | fatal)
    return won.reshape(n_turns, n_rollouts).mean(axis=1)


