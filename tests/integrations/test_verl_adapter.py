"""The verl adapter inside verl 0.9.1's own agent-loop worker, on CPU (``make test-integrations``).

verl is not in the project's venv (it pulls Ray and, unpinned, a CUDA build of torch); these
tests run in ``.venv-integrations`` and skip elsewhere. Everything here is verl's code, built
from verl's own default trainer config (``verl/trainer/config/_generated_ppo_trainer.yaml``):
``AgentLoopWorker`` (its ``__init__`` loads the ``agent_loop_config_path`` file that
:func:`~analyses.budgetmix.adapters.verl.write_agent_loop_config` writes and a function tool
from ``multi_turn.function_tool_path``), ``generate_sequences`` on a ``DataProto``, hydra
building the adapter's class from the registry's ``_target_``, ``ToolAgentLoop.run`` with its
tool parser, tool calls and continuous-token builder, ``RLHFDataset`` and ``collate_fn`` reading
a dataset written by ``budgetmix assign``, and ``RayPPOTrainer._get_gen_batch``.

One part is a stand-in: the generation server. verl's rollout servers are vLLM, SGLang and
TensorRT-LLM replicas (Ray actors on GPUs); none is installed here (``vllm`` and ``sglang`` are
not, and ``get_rollout_replica_class("vllm")`` raises "vllm version None not supported and
SGLang also not Found"). verl's ``LLMServerClient`` is used with its two Ray calls (acquire a
server from the load balancer, release it) replaced by a server object whose ``generate.remote``
returns a ``TokenOutput`` that always asks for one more tool call, so every sample runs until
its turn limit. The model is a tokenizer and a config only (no weights are loaded).
"""

from __future__ import annotations

import asyncio
import copy
import inspect
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

try:
    import verl
    from verl.experimental.agent_loop import agent_loop as verl_agent_loop
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
except ModuleNotFoundError as err:
    if err.name is not None and err.name.split(".")[0] == "verl":
        pytest.skip("verl is not installed (make test-integrations installs it in "
                    ".venv-integrations)", allow_module_level=True)
    pytest.skip(f"verl's agent loop does not import here: {err!r}", allow_module_level=True)
except ImportError as err:
    pytest.skip(f"verl's agent loop does not import here: {err!r}", allow_module_level=True)

from omegaconf import OmegaConf
from verl.protocol import DataProto
from verl.workers.rollout.llm_server import LLMServerClient
from verl.workers.rollout.replica import TokenOutput

from analyses.budgetmix.adapters import verl as adapter

CONFIGURED_LIMIT = 5
"""``actor_rollout_ref.rollout.multi_turn.max_assistant_turns`` in these tests."""

TOOL_CALL = '<tool_call>{"name": "step", "arguments": {}}</tool_call><|im_end|>'
"""Every generation: a call to the ``step`` tool, in verl's ``hermes`` tool-call format."""

# A Qwen-like chat template, small enough to read: tools in a system turn, one block per
# message, tool calls in <tool_call> tags, and the assistant's generation prompt.
CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\ntools:{% for t in tools %} {{ t.function.name }}"
    "{% endfor %}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{\"name\": \"{{ c.function.name }}\", "
    "\"arguments\": {}}</tool_call>{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

TOOLS_FILE = '''
from verl.tools.function_tool import function_tool


@function_tool("step")
def step() -> str:
    """Take one step."""
    return "ok"
'''


class _Server:
    """Stands in for a vLLM server actor: ``generate.remote`` answers every turn with a tool call."""

    def __init__(self, token_ids: list[int]):
        self.token_ids = token_ids
        self.generate = self  # verl calls ``server.generate.remote(...)``

    async def remote(self, **kwargs: Any) -> TokenOutput:
        return TokenOutput(token_ids=list(self.token_ids), log_probs=[0.0] * len(self.token_ids))


class _Client(LLMServerClient):
    """verl's ``LLMServerClient`` without Ray: one server, and a count of each sample's generations."""

    def __init__(self, config: Any, token_ids: list[int]):
        super().__init__(config)
        self.server = _Server(token_ids)
        self.generations: Counter[str] = Counter()  # by the agent loop's per-sample request id

    async def _acquire_server(self, request_id: str, **extra: Any) -> tuple[str, Any]:
        self.generations[request_id] += 1
        return "server-0", self.server

    def _release_server(self, server_id: str, request_id: str | None = None) -> None:
        pass


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model directory verl's ``HFModelConfig`` accepts: a byte-level BPE tokenizer, a config."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(["go step ok"], trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    path = tmp_path_factory.mktemp("model")
    fast.save_pretrained(path)
    LlamaConfig(vocab_size=len(fast), hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                num_attention_heads=2, num_key_value_heads=2,
                architectures=["LlamaForCausalLM"]).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def trainer_config(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """verl's default PPO trainer config, set up for the budgeted tool agent loop."""
    tmp = tmp_path_factory.mktemp("verl")
    (tmp / "tools.py").write_text(TOOLS_FILE)
    config = OmegaConf.load(Path(verl.__file__).parent / "trainer/config/_generated_ppo_trainer.yaml")
    config.actor_rollout_ref.model.path = str(model_dir)
    rollout = config.actor_rollout_ref.rollout
    rollout.name = "vllm"
    rollout.prompt_length, rollout.response_length = 512, 2048
    rollout.multi_turn.max_assistant_turns = CONFIGURED_LIMIT
    rollout.multi_turn.function_tool_path = str(tmp / "tools.py")
    rollout.agent.agent_loop_config_path = str(adapter.write_agent_loop_config(tmp / "loops.yaml"))
    rollout.agent.default_agent_loop = adapter.AGENT_NAME
    return config


def _worker(config: Any) -> tuple[Any, _Client]:
    """verl's ``AgentLoopWorker`` built from ``config``, and its client (generation counts)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(config.actor_rollout_ref.model.path)
    client = _Client(config, tokenizer.encode(TOOL_CALL, add_special_tokens=False))
    return verl_agent_loop.AgentLoopWorker(config, llm_client=client), client


def _batch(extra_infos: list[dict[str, Any]], **columns: list[Any]) -> DataProto:
    """A rollout batch as the trainer hands it over: one chat prompt and ``extra_info`` per row."""
    non_tensors = {"raw_prompt": [[{"role": "user", "content": "go"}]] * len(extra_infos),
                   "extra_info": extra_infos, **columns}
    arrays = {}
    for key, values in non_tensors.items():
        arrays[key] = np.empty(len(values), dtype=object)
        for i, value in enumerate(values):  # one object per row (lists and dicts kept whole)
            arrays[key][i] = value
    return DataProto.from_dict(non_tensors=arrays, meta_info={"global_steps": 1})


def _rollout(worker: Any, batch: DataProto) -> DataProto:
    return asyncio.run(worker.generate_sequences(batch))


def test_the_budgeted_loop_is_verls_tool_agent_loop():
    cls = adapter.BudgetedToolAgentLoop
    assert issubclass(cls, ToolAgentLoop)
    assert f"{cls.__module__}.{cls.__qualname__}" == adapter.TARGET
    parameters = inspect.signature(ToolAgentLoop.run).parameters
    assert list(parameters)[:2] == ["self", "sampling_params"]  # what the override passes on
    assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    assert inspect.iscoroutinefunction(ToolAgentLoop.run)


def test_each_row_stops_at_its_budget_inside_verls_worker(trainer_config):
    worker, client = _worker(trainer_config)
    assert verl_agent_loop._agent_loop_registry[adapter.AGENT_NAME]["_target_"] == adapter.TARGET
    extra_infos = [{"index": 0, "max_turns": 2}, {"index": 1, "max_turns": 4},
                   {"index": 2}, {"index": 3, "max_turns": 1}]
    out = _rollout(worker, _batch(extra_infos))

    budgets = [2, 4, CONFIGURED_LIMIT, 1]  # a row without a budget keeps the configured limit
    assert sorted(client.generations.values()) == sorted(budgets)
    # verl counts the prompt, every generation and every tool answer: 2 * budget turns, and
    # the last generation's tool call is not run, so budget - 1 tool calls are answered
    assert out.non_tensor_batch["__num_turns__"].tolist() == [2 * b for b in budgets]
    assert [len(r) for r in out.non_tensor_batch["tool_rewards"]] == [b - 1 for b in budgets]
    assert list(out.non_tensor_batch["extra_info"]) == extra_infos
    assert list(out.non_tensor_batch["agent_name"]) == [adapter.AGENT_NAME] * 4
    # the generated spans (response_mask 1) are the budget's generations, the tool answers 0
    n_call_tokens = len(client.server.token_ids)
    assert out.batch["response_mask"].sum(dim=1).tolist() == [b * n_call_tokens for b in budgets]


def test_verls_own_tool_agent_ignores_the_rows_budget(trainer_config):
    # the contrast: the same rows, one sent to verl's registered "tool_agent" by agent_name
    worker, client = _worker(trainer_config)
    out = _rollout(worker, _batch([{"index": 0, "max_turns": 2}, {"index": 1, "max_turns": 2}],
                                  agent_name=["tool_agent", adapter.AGENT_NAME]))
    assert out.non_tensor_batch["__num_turns__"].tolist() == [2 * CONFIGURED_LIMIT, 4]
    assert sorted(client.generations.values()) == [2, CONFIGURED_LIMIT]


def test_register_agent_loop_fills_verls_registry_in_process(trainer_config):
    config = copy.deepcopy(trainer_config)
    config.actor_rollout_ref.rollout.agent.agent_loop_config_path = None
    verl_agent_loop._agent_loop_registry.pop("budgetmix_in_process", None)
    cls = adapter.register_agent_loop("budgetmix_in_process")
    assert cls is adapter.BudgetedToolAgentLoop
    assert verl_agent_loop._agent_loop_registry["budgetmix_in_process"] == {"_target_": adapter.TARGET}
    worker, _ = _worker(config)
    out = _rollout(worker, _batch([{"index": 0, "max_turns": 3}],
                                  agent_name=["budgetmix_in_process"]))
    assert out.non_tensor_batch["__num_turns__"].tolist() == [6]


def test_a_dataset_from_budgetmix_assign_reaches_the_loop(trainer_config, tmp_path):
    # budgetmix assign --trainer verl -> RLHFDataset -> collate_fn -> the trainer's gen batch
    import pyarrow as pa
    import pyarrow.parquet as pq
    from torch.utils.data import DataLoader
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    from analyses.budgetmix.assign import AssignOptions, assign_budgets
    from analyses.budgetmix.schedule import BudgetSchedule

    n = 6
    pq.write_table(pa.Table.from_pylist([
        {"data_source": "units", "prompt": [{"role": "user", "content": f"go {i}"}],
         "reward_model": {"style": "rule", "ground_truth": "ok"},
         "extra_info": {"index": i, "split": "train"}} for i in range(n)]),
        tmp_path / "train.parquet")
    result = assign_budgets(tmp_path / "train.parquet", BudgetSchedule([1, 3], [0.5, 0.5]),
                            tmp_path / "train-budgets.parquet",
                            AssignOptions(seed=2, trainer="verl"))
    assigned = [row["extra_info"]["max_turns"]
                for row in pq.read_table(result.path).to_pylist()]
    assert set(assigned) == {1, 3}  # the seed draws both budgets

    worker, client = _worker(trainer_config)
    dataset = RLHFDataset(str(result.path), worker.tokenizer, trainer_config.data)
    batch = DataProto.from_single_dict(next(iter(DataLoader(dataset, batch_size=n,
                                                            collate_fn=collate_fn))))
    gen_batch = RayPPOTrainer._get_gen_batch(None, batch)  # uses only the batch
    assert [row["max_turns"] for row in gen_batch.non_tensor_batch["extra_info"]] == assigned
    out = _rollout(worker, gen_batch)
    assert out.non_tensor_batch["__num_turns__"].tolist() == [2 * b for b in assigned]
    assert sorted(client.generations.values()) == sorted(assigned)
