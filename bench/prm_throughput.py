"""Training throughput of ``prm train`` beside TRL's PRMTrainer, on the same model and data.

Both train the same tiny Qwen2 (built from a config, ~6M parameters by default) with the same
byte-level BPE tokenizer (trained here on the data, offline) on the training split of the same
store, for the same number of optimizer steps, and report real (non-padding) tokens per second
the padding fraction, and scored turns per second (turns whose label reached the loss):

- ``prm train``: one forward pass per window scores every turn at its step marker; batches are
  length-bucketed by a token budget (``--batch-tokens``, default ``8 * max_length``);
- TRL 1.13.0 ``trl.experimental.prm.PRMTrainer``: ``Qwen2ForTokenClassification`` (2 labels),
  batches of ``--batch-size`` rows padded to the longest, truncated at ``--max-length``; the
  same step marker is its ``step_separator``; gradient checkpointing off, as in ours.

On tau-bench the system prompt alone is longer than 1024 tokens: TRL truncates every row at
``--max-length`` from the right, so no step label survives (its train loss is 0 and its scored
turns/s is 0), while ``prm train`` keeps the prompt's last quarter window and windows the
turns. Tokens/s still compares the raw speed of the two loops; ``--data sim`` (short prompts)
compares them on data where TRL keeps most steps.

With CUDA available it also runs ``prm train`` on the GPU in bf16 and reports tokens per second
and peak memory. Without CUDA that part is skipped and the script exits 0.

Usage:
    .venv/bin/python bench/prm_throughput.py                 # tau-bench airline data
    .venv/bin/python bench/prm_throughput.py --data sim      # simulator runs instead
    .venv/bin/python bench/prm_throughput.py --steps 10 --threads 1 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
TAU_AIRLINE = REPO.parent / "shared" / "data" / "tau-bench" / "gpt-4o-airline.json"


@dataclass
class Measurement:
    """One side of the comparison."""

    name: str
    steps: int
    real_tokens: int
    padded_tokens: int
    seconds: float
    scored_steps: int = 0
    peak_memory_gb: float | None = None

    @property
    def tokens_per_s(self) -> float:
        return self.real_tokens / self.seconds if self.seconds else 0.0

    @property
    def padding(self) -> float:
        return 1.0 - self.real_tokens / self.padded_tokens if self.padded_tokens else 0.0

    @property
    def steps_per_s(self) -> float:
        return self.scored_steps / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, object]:
        return {**self.__dict__, "real_tokens_per_s": self.tokens_per_s,
                "padding_fraction": self.padding, "scored_steps_per_s": self.steps_per_s}


def build_store(kind: str, directory: Path) -> Path:
    """A store file with the benchmark data: tau-bench airline or simulator runs."""
    from recovery.store import open_store

    store = directory / "bench.duckdb"
    opened = open_store(store)
    try:
        if kind == "tau":
            if not TAU_AIRLINE.exists():
                raise SystemExit(f"tau-bench data not found at {TAU_AIRLINE}; use --data sim")
            opened.ingest_file(TAU_AIRLINE)
        else:
            from recovery.simulate import PRESETS, SimConfig, write_runs

            paths = write_runs(
                SimConfig(policies={"base": PRESETS["base"], "rl": PRESETS["rl"]}, n_tasks=100,
                          n_samples=4, budgets=[30], seed=0),
                directory / "runs",
            )
            for path in paths:
                opened.ingest_file(path)
    finally:
        opened.close()
    return store


def train_examples(store: Path, seed: int):
    """The training split, as ``prm train`` makes it (outcome labels: every store has them)."""
    from prm.data.examples import TaskSplit, load_step_examples
    from recovery.store import open_store

    opened = open_store(store, read_only=True)
    try:
        examples = load_step_examples(opened.con, "outcome")
    finally:
        opened.close()
    return TaskSplit.make(examples, seed=seed).select(examples, "train")


def run_prm_train(args: argparse.Namespace, store: Path, out: Path, device: str) -> Measurement:
    """``prm train`` for ``--steps`` optimizer steps; the loop is timed, set-up is not."""
    import torch

    from prm.train import TrainConfig, train

    config = TrainConfig(
        store=store, out=out, backbone="tiny", labels="outcome", device=device, epochs=1000,
        batch_tokens=args.batch_tokens or 8 * args.max_length, lr=1e-4,
        max_length=args.max_length, max_prompt_tokens=args.max_length // 4, seed=args.seed,
        stop_after=args.steps, log_every=1, progress=False, threads=args.threads,
        vocab_size=args.vocab_size, hidden_size=args.hidden_size, num_layers=args.num_layers,
        num_heads=args.num_heads, intermediate_size=args.intermediate_size,
        novelty=False,  # the same model as TRL's: no word-novelty inputs
    )
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    result = train(config, echo=lambda *_: None)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None
    return Measurement(f"prm train ({device}{', bf16' if device == 'cuda' else ''})",
                       result.steps, result.real_tokens, result.padded_tokens, result.wall_s,
                       result.scored_turns, peak)


def run_trl(args: argparse.Namespace, examples, out: Path) -> Measurement:
    """TRL's PRMTrainer on the same data, tokenizer and backbone size."""
    import torch
    from datasets import Dataset, disable_progress_bars
    from transformers import Qwen2Config, Qwen2ForTokenClassification, TrainerCallback
    from transformers.data import DataCollatorForTokenClassification
    from trl.experimental.prm import PRMConfig, PRMTrainer

    from prm.data.examples import trl_records
    from prm.data.tokenize import STEP_TOKEN, train_tokenizer

    texts = sorted({e.prompt for e in examples if e.prompt}) + [s for e in examples
                                                                 for s in e.steps]
    tokenizer = train_tokenizer(texts, vocab_size=args.vocab_size)
    torch.manual_seed(args.seed)
    model = Qwen2ForTokenClassification(Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=args.hidden_size,
        intermediate_size=args.intermediate_size, num_hidden_layers=args.num_layers,
        num_attention_heads=args.num_heads, num_key_value_heads=args.num_heads,
        max_position_embeddings=args.max_length, tie_word_embeddings=False, num_labels=2,
        pad_token_id=tokenizer.pad_token_id,
    ))
    disable_progress_bars()
    records, _ = trl_records(examples)
    dataset = Dataset.from_list([{k: r[k] for k in ("prompt", "completions", "labels")}
                                 for r in records])
    counts = {"real": 0, "padded": 0, "scored": 0}
    collator = DataCollatorForTokenClassification(tokenizer)

    def counting_collator(features):
        batch = collator(features)
        counts["real"] += int(batch["attention_mask"].sum())
        counts["padded"] += int(batch["attention_mask"].numel())
        counts["scored"] += int((batch["labels"] != -100).sum())
        return batch

    class Clock(TrainerCallback):
        def on_train_begin(self, *_, **__):
            counts["real"] = counts["padded"] = counts["scored"] = 0
            counts["start"] = time.perf_counter()

        def on_train_end(self, *_, **__):
            counts["seconds"] = time.perf_counter() - counts["start"]

    on_cuda = torch.cuda.is_available() and args.trl_device == "cuda"
    config = PRMConfig(
        output_dir=str(out), max_steps=args.steps, per_device_train_batch_size=args.batch_size,
        max_length=args.max_length, step_separator=STEP_TOKEN, learning_rate=1e-4,
        gradient_checkpointing=False, bf16=on_cuda, use_cpu=not on_cuda, report_to="none",
        save_strategy="no", logging_strategy="no", disable_tqdm=True, seed=args.seed,
        dataloader_pin_memory=False, warmup_steps=0,
    )
    trainer = PRMTrainer(model=model, args=config, train_dataset=dataset,
                         processing_class=tokenizer, data_collator=counting_collator,
                         callbacks=[Clock()])
    trainer.train()
    return Measurement(f"TRL PRMTrainer ({'cuda, bf16' if on_cuda else 'cpu'})", args.steps,
                       counts["real"], counts["padded"], counts["seconds"], counts["scored"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", choices=("tau", "sim"), default="tau")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps per side")
    parser.add_argument("--max-length", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=8, help="TRL rows per batch")
    parser.add_argument("--batch-tokens", type=int, default=None,
                        help="prm train token budget (default 8 x max length)")
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--num-layers", type=int, default=5)
    parser.add_argument("--num-heads", type=int, default=4)
    parser.add_argument("--intermediate-size", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trl-device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--skip-trl", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    results: list[Measurement] = []
    with tempfile.TemporaryDirectory(prefix="prm-bench-") as tmp:
        tmp_path = Path(tmp)
        store = build_store(args.data, tmp_path)
        examples = train_examples(store, args.seed)
        print(f"data {args.data}: {len(examples)} training trajectories; torch threads "
              f"{torch.get_num_threads()}; {args.steps} steps per side", flush=True)
        results.append(run_prm_train(args, store, tmp_path / "prm", "cpu"))
        if not args.skip_trl:
            results.append(run_trl(args, examples, tmp_path / "trl"))
        if torch.cuda.is_available():
            results.append(run_prm_train(args, store, tmp_path / "prm-cuda", "cuda"))
        else:
            print("CUDA not available: GPU path skipped")
    n_params = (args.vocab_size * args.hidden_size + args.num_layers * (
        4 * args.hidden_size**2 + 3 * args.hidden_size * args.intermediate_size))
    print(f"model: Qwen2 {args.num_layers} layers x {args.hidden_size}, ~{n_params / 1e6:.1f}M "
          f"parameters, max length {args.max_length}")
    print(f"{'trainer':32s} {'steps':>6s} {'real tok/s':>11s} {'padding':>8s} "
          f"{'scored turns/s':>15s} {'peak GB':>8s}")
    for m in results:
        peak = f"{m.peak_memory_gb:.2f}" if m.peak_memory_gb is not None else "-"
        print(f"{m.name:32s} {m.steps:6d} {m.tokens_per_s:11,.0f} {m.padding:8.1%} "
              f"{m.steps_per_s:15,.1f} {peak:>8s}")
    ratio = None
    if len(results) >= 2 and results[1].tokens_per_s:
        ratio = results[0].tokens_per_s / results[1].tokens_per_s
        print(f"ratio prm train / TRL PRMTrainer (real tokens/s, CPU): {ratio:.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: v if not isinstance(v, Path) else str(v)
                                                  for k, v in vars(args).items()},
                                         "results": [m.as_dict() for m in results],
                                         "ratio": ratio}, indent=1))


if __name__ == "__main__":
    main()
