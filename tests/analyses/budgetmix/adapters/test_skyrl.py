"""The SkyRL adapter against the real ``skyrl_gym`` (0.4.0) and a stand-in for the generator.

The environment is a real ``skyrl_gym`` text environment (``BaseTextEnv``, registered with
``skyrl_gym.register`` and built by ``skyrl_gym.make(env_class, env_config=..., extras=...)``
as SkyRL's generator builds it), stepping with ``BaseTextEnvStepOutput``. ``skyrl_gym`` has no
generator: ``SkyRLGymGenerator`` lives in ``skyrl-train``, which is not installed, so the
stand-in does what ``skyrl_gym_generator.py`` does with the turn limit: ``__init__`` sets
``self.max_turns = generator_cfg.max_turns``; ``agent_loop`` first writes
``env_extras["max_turns"] = self.max_turns``, makes the environment from ``env_extras``, and
steps it until ``done``; ``generate`` runs the trajectories concurrently, the samples of one
prompt sharing one ``env_extras`` dict.
"""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

from analyses.budgetmix.adapters import skyrl as adapter

skyrl_gym = pytest.importorskip("skyrl_gym")
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput  # noqa: E402

ENV_ID = "budgetmix_test_counter"


class _CountingEnv(BaseTextEnv):
    """Ends after ``extras["max_turns"]`` steps, as skyrl_gym's own environments do."""

    def __init__(self, env_config=None, extras=None):
        super().__init__()
        extras = extras or {}
        self.max_turns = extras.get("max_turns", 1)

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        done = self.turns >= self.max_turns
        return BaseTextEnvStepOutput(observations=[] if done else [
            {"role": "user", "content": f"turn {self.turns} done"}], reward=float(done),
            done=done, metadata={"turns": self.turns})


if ENV_ID not in skyrl_gym.registry:
    skyrl_gym.register(id=ENV_ID, entry_point=_CountingEnv)


class _SkyRLGymGenerator:
    def __init__(self, max_turns: int):
        self.max_turns = max_turns

    async def agent_loop(self, prompt, env_class, env_extras, max_tokens=64, max_input_length=64,
                         sampling_params=None, trajectory_id=None):
        env_extras["max_turns"] = self.max_turns
        env = skyrl_gym.make(env_class, env_config={}, extras=env_extras)
        assert isinstance(env, BaseTextEnv)
        observations, _ = env.init([{"role": "user", "content": prompt}])
        done = False
        while not done:
            await asyncio.sleep(0)  # the inference engine (other trajectories run meanwhile)
            output = env.step("action")
            assert set(output) <= set(BaseTextEnvStepOutput.__annotations__)
            observations += output["observations"]
            done = output["done"]
        env.close()
        return {"prompt": prompt, "turns": env.turns, "reward": output["reward"]}

    async def generate(self, prompts, env_extras, n_samples):
        return await asyncio.gather(*[
            self.agent_loop(p, ENV_ID, extras) for p, extras in zip(prompts, env_extras, strict=True)
            for _ in range(n_samples)
        ])


def test_each_trajectory_stops_at_its_rows_budget():
    generator = adapter.budgeted_generator(_SkyRLGymGenerator)(max_turns=10)
    extras = [{"max_turns": 2, "reward_spec": {}}, {"max_turns": 6}, {"data_source": "x"}]
    outputs = asyncio.run(generator.generate(["a", "b", "c"], extras, n_samples=3))
    assert [o["turns"] for o in outputs] == [2, 2, 2, 6, 6, 6, 10, 10, 10]
    assert all(o["reward"] == 1.0 for o in outputs)  # each ended through done, at its budget
    assert [e["max_turns"] for e in extras] == [2, 6, 10]  # what SkyRL wrote back
    assert generator.max_turns == 10  # outside a row: the configured generator.max_turns
    plain = _SkyRLGymGenerator(max_turns=10)  # without the adapter the row's budget is lost
    outputs = asyncio.run(plain.generate(["a"], [{"max_turns": 2}], n_samples=1))
    assert outputs[0]["turns"] == 10


def test_the_class_is_named_in_this_module():
    cls = adapter.budgeted_generator(_SkyRLGymGenerator)
    assert (cls.__module__, cls.__qualname__) == (adapter.__name__, adapter.CLASS_NAME)
    assert issubclass(cls, _SkyRLGymGenerator)


@pytest.mark.skipif(importlib.util.find_spec("skyrl_train") is not None,
                    reason="SkyRL is installed")
def test_without_skyrl_the_class_says_what_is_missing():
    with pytest.raises(ImportError, match="skyrl"):
        adapter.BudgetedSkyRLGymGenerator  # noqa: B018
