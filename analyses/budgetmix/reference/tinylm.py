"""A tiny chat model built locally (no download) that calls tools: for TRL runs on CPU
(the end-to-end tests and ``bench/budgetmix_trl.py``).

The tokenizer is a byte-level BPE trained on the conversations themselves, with Qwen2.5's chat
template as TRL ships it (so ``GRPOTrainer`` recognises it and parses ``<tool_call>`` blocks);
the model is a two-layer Qwen2 decoder from a config, warm-started by a few supervised steps on
transcripts of scripted tool calls (a random model never writes a well-formed tool call).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from recovery.config import opt

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>",
                  "<tool_response>", "</tool_response>"]


def tool_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """An assistant message holding one tool call."""
    return {"role": "assistant", "content": "",
            "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}]}


def scripted_conversations(env_factory: Any, rows: list[dict[str, Any]], n_turns: int | None,
                           seed: int = 0, explore: float = 0.2) -> list[list[dict[str, Any]]]:
    """Conversations of scripted tool calls played against fresh environments (SFT data).

    The script applies units one by one and repairs after an error; with probability
    ``explore`` it applies a batch instead.

    Args:
        env_factory: Builds a fresh environment (``reset(**row)``, tools as methods).
        rows: Task rows; ``row["prompt"][0]["content"]`` is prepended to the task's text.
        n_turns: Turns per conversation; ``None`` plays each episode to its end (the task
            finished, or the row's ``max_turns`` used up).
        seed: Seed of the script's choices.
        explore: Probability of a batch instead of a single unit.

    Returns:
        One message list per row (user, then assistant tool call / tool answer pairs).
    """
    from analyses.budgetmix.assign import row_budget

    rng = random.Random(seed)
    conversations = []
    for row in rows:
        env = env_factory()
        messages = [{"role": "user", "content": row["prompt"][0]["content"] + env.reset(**row)}]
        last = ""
        limit = n_turns if n_turns is not None else (row_budget(row) or 10)
        for _ in range(limit):
            if n_turns is None and getattr(env, "finished", None) is not None:
                break
            if last.startswith(("Error", "Invalid", "Could not")):
                name = "diagnose_and_fix"
            else:
                name = "apply_batch" if rng.random() < explore else "apply_unit"
            arguments = {"units": "1-2"} if name == "apply_batch" else {"unit": 1}
            messages.append(tool_call(name, arguments))
            last = getattr(env, name)(**arguments)
            messages.append({"role": "tool", "name": name, "content": last})
        conversations.append(messages)
    return conversations


def build_tokenizer(texts: list[str], vocab_size: int = 600) -> Any:
    """A byte-level BPE tokenizer with the chat template TRL knows as Qwen2.5's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen2_5_chat_template

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>")
    fast.chat_template = qwen2_5_chat_template
    return fast


def chat_tokenizer(conversations: list[list[dict[str, Any]]], tools: list[dict[str, Any]]) -> Any:
    """A tokenizer trained on the conversations as the chat template renders them."""
    renderer = build_tokenizer(["bootstrap"], vocab_size=300)  # the template needs no vocabulary
    texts = [renderer.apply_chat_template(c, tools=tools, tokenize=False) for c in conversations]
    return build_tokenizer(texts)


def build_model(tokenizer: Any, seed: int = 0) -> Any:
    """A two-layer Qwen2 causal LM from a config (70,416 parameters with a 594-token vocabulary)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=48, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None, tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config)


@dataclass(frozen=True)
class WarmStartOptions:
    """How :func:`supervised_warm_start` trains."""

    steps: int = opt(60, "Optimiser steps.")
    lr: float = opt(3e-3, "Adam's learning rate.")
    batch_size: int | None = opt(None, "Conversations per step, drawn at random; None = all.")
    seed: int = opt(0, "Seed of the mini-batch draws.")


def supervised_warm_start(model: Any, tokenizer: Any, conversations: list[list[dict[str, Any]]],
                          tools: list[dict[str, Any]],
                          options: WarmStartOptions = WarmStartOptions()) -> float:
    """Teach ``model`` (in place) to answer with tool calls, the loss on the assistant spans of
    ``conversations`` only (``tools``: the JSON schemas rendered in the system prompt); returns
    the last step's mean loss."""
    steps, lr, batch_size, seed = options.steps, options.lr, options.batch_size, options.seed
    import torch

    examples = []
    for messages in conversations:
        ids, labels = [], []
        for k, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            prefix = tokenizer.apply_chat_template(messages[:k], tools=tools, tokenize=False,
                                                   add_generation_prompt=True)
            upto = tokenizer.apply_chat_template(messages[:k + 1], tools=tools, tokenize=False)
            prefix_ids = tokenizer(prefix, add_special_tokens=False)["input_ids"]
            upto_ids = tokenizer(upto, add_special_tokens=False)["input_ids"]
            labels = labels + [-100] * (len(prefix_ids) - len(labels))
            labels += upto_ids[len(prefix_ids):]
            ids = upto_ids
        examples.append((ids, labels[:len(ids)]))
    width = max(len(ids) for ids, _ in examples)
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in examples])
    attention = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in examples])
    targets = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in examples])
    device = next(model.parameters()).device
    input_ids, attention, targets = input_ids.to(device), attention.to(device), targets.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    loss_value = float("nan")
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        if batch_size is None or batch_size >= len(examples):
            loss = model(input_ids=input_ids, attention_mask=attention, labels=targets).loss
        else:
            pick = torch.randperm(len(examples), generator=generator)[:batch_size]
            loss = model(input_ids=input_ids[pick], attention_mask=attention[pick],
                         labels=targets[pick]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        loss_value = float(loss.detach())
    return loss_value
