"""The neural PRM: a causal backbone and a head that scores every turn at its step marker.

A trajectory is read once, left to right (:mod:`prm.data.windows`). The score of turn ``t`` is read
at turn ``t``'s marker: a linear head on the hidden state there (``pool="marker"``), or on that
and the mean hidden state over the turn's own tokens (``pool="marker+mean"``). Causal attention
means those states are functions of the tokens up to the marker only, so no turn sees a later
one, and one forward pass scores every turn (instead of one pass per prefix).

Heads: ``binary`` (one logit; the score is its sigmoid, P(good step)), trained with binary
cross-entropy on soft targets in [0, 1]; or ``ternary`` (three logits for the labels -1 / 0 /
+1), trained with cross-entropy, whose score is P(the step is not an error) = 1 - P(-1): a
neutral step is no error (a stored label below 0 is), so the score means the same thing
everywhere downstream (``step_scores``, ``prm`` marking, BudgetMix).

Word-novelty inputs (on by default for ``tiny``): each token also carries whether it belongs
to an action and whether its word is one the window's prompt and observations never showed
(:func:`prm.data.novelty.novelty_codes`), the comparison a silent error (a wrong id or amount) needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from prm.data.novelty import novelty_codes, word_piece_tables
from prm.data.windows import collate, token_budget_batches
from prm.spec import POOLS

if TYPE_CHECKING:
    import pandas as pd
    import torch
    from transformers import PreTrainedTokenizerBase

    from prm.data.windows import Window


def _torch_module() -> type:
    """The StepScorer class, defined on first use so that importing prm.neural.model does not import
    torch.

    Long because it holds the class definition (its __init__, features and forward), which the
    function keeps out of module import.
    """
    from torch import nn

    class StepScorer(nn.Module):
        """A causal backbone and a linear head read at the step markers.

        With ``novelty`` each token's input embedding gets a learned vector for its
        :func:`prm.data.novelty.novelty_codes` and its role: whether the word it belongs to, up to
        it, is new to what the prompt and the observations of the window said, and whether the
        token is part of an action. A wrong id or amount is a word the history never showed;
        finding that by attention alone takes a previous-token head, an induction head and a
        head that carries the result to the marker, which a small model trained briefly on CPU
        did not learn (docs/prm.md measures it). The codes hand it the comparison; the model
        still learns which new words matter.
        """

        def __init__(self, backbone: Any, novelty_tables: torch.Tensor | None = None,
                     n_outputs: int = 1, pool: str = "marker"):
            super().__init__()
            if pool not in POOLS:
                raise ValueError(f"unknown pool {pool!r}; use {' or '.join(POOLS)}")
            self.backbone = backbone
            self.pool = pool
            self.n_outputs = n_outputs
            width = backbone.config.hidden_size * (2 if pool == "marker+mean" else 1)
            self.head = nn.Linear(width, n_outputs)
            self.novelty = None
            if novelty_tables is not None:
                self.register_buffer("word_pieces", novelty_tables.clone())
                self.novelty = nn.Embedding(6, backbone.config.hidden_size)
                nn.init.normal_(self.novelty.weight, std=0.02)

        def features(
            self,
            input_ids: torch.Tensor,
            step_mask: torch.Tensor,
            actions: torch.Tensor | None = None,
            turn_index: torch.Tensor | None = None,
        ) -> torch.Tensor:
            """What the head reads at each marker, ``(markers, width)``, row-major order.

            ``actions`` marks the tokens of the agent's actions (``Batch.actions``); without it
            every token counts as evidence and none as an action. ``turn_index`` (needed by
            ``marker+mean``) maps tokens to their scored turn.

            No attention mask: padding is on the right and attention is causal, so a real
            token never attends to padding, and the kernel takes its plain causal path.
            """
            import torch

            if self.novelty is not None:
                embed = self.backbone.get_input_embeddings()
                evidence = None if actions is None else ~actions
                codes = novelty_codes(input_ids, self.word_pieces, evidence)
                if actions is not None:
                    codes = codes + 3 * actions.long()
                hidden = self.backbone(
                    inputs_embeds=embed(input_ids) + self.novelty(codes), use_cache=False
                ).last_hidden_state
            else:
                hidden = self.backbone(input_ids=input_ids, use_cache=False).last_hidden_state
            # Only the markers go on: the gather saves the (B, L) logits tensor and keeps the
            # loss in the order the targets are built.
            marker = hidden[step_mask]
            if self.pool == "marker":
                return marker
            if turn_index is None:
                raise ValueError("pool marker+mean needs the batch's turn_index")
            flat = turn_index.reshape(-1)
            keep = flat >= 0
            values = hidden.reshape(-1, hidden.shape[-1])[keep].float()
            sums = torch.zeros((marker.shape[0], hidden.shape[-1]), dtype=values.dtype,
                               device=hidden.device).index_add_(0, flat[keep], values)
            counts = torch.bincount(flat[keep], minlength=marker.shape[0]).clamp(min=1)
            mean = (sums / counts[:, None]).to(marker.dtype)
            return torch.cat([marker, mean], dim=-1)

        def forward(
            self,
            input_ids: torch.Tensor,
            step_mask: torch.Tensor,
            actions: torch.Tensor | None = None,
            turn_index: torch.Tensor | None = None,
        ) -> torch.Tensor:
            """Logits at the marked positions: ``(markers,)`` binary, ``(markers, 3)`` ternary."""
            logits = self.head(self.features(input_ids, step_mask, actions, turn_index)).float()
            return logits.squeeze(-1) if self.n_outputs == 1 else logits

    return StepScorer


def build_scorer(
    backbone: Any, tokenizer: PreTrainedTokenizerBase | None = None, *, novelty: bool = False,
    n_outputs: int = 1, pool: str = "marker",
) -> torch.nn.Module:
    """Wrap a backbone with a fresh head (a ``StepScorer`` module).

    Args:
        backbone: A causal ``transformers`` model.
        tokenizer: Its tokenizer (needed for ``novelty``).
        novelty: Add word-novelty inputs (see ``StepScorer``).
        n_outputs: 1 (binary) or 3 (ternary).
        pool: ``marker`` or ``marker+mean``.
    """
    tables = None
    if novelty:
        if tokenizer is None:
            raise ValueError("novelty inputs need the tokenizer")
        size = backbone.get_input_embeddings().num_embeddings
        tables = word_piece_tables(tokenizer, max(size, len(tokenizer)))
    return _torch_module()(backbone, tables, n_outputs, pool)


def step_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean loss of step logits against targets in [0, 1]; NaN targets are skipped.

    Binary logits ``(n,)``: binary cross-entropy on the soft targets. Ternary logits ``(n, 3)``:
    cross-entropy against the classes -1 / 0 / +1 (targets 0, 0.5, 1).

    Returns a zero that still carries gradient when no target is known, so every process of a
    distributed run takes part in the same all-reduce.
    """
    import torch.nn.functional as F

    known = ~targets.isnan()
    if not bool(known.any()):
        return logits.sum() * 0.0
    if logits.dim() == 2:
        import torch

        from prm.data.labels import class_index

        classes = torch.from_numpy(class_index(targets[known].detach().cpu().numpy())).to(
            logits.device)
        return F.cross_entropy(logits[known], classes)
    return F.binary_cross_entropy_with_logits(logits[known], targets[known])


def probabilities(logits: torch.Tensor) -> torch.Tensor:
    """Binary: the sigmoid ``(n,)``. Ternary: class probabilities ``(n, 3)`` of -1, 0, +1."""
    import torch

    return torch.sigmoid(logits) if logits.dim() == 1 else torch.softmax(logits, dim=-1)


def good_score(probs: Any) -> Any:
    """The PRM score, P(the step is not an error), from :func:`probabilities` (numpy)."""
    return probs if probs.ndim == 1 else 1.0 - probs[:, 0]


def step_frame(windows: list[Any], probs: list[Any]) -> pd.DataFrame:
    """One row per scored turn of ``windows``: ``traj_id, t, target, score`` and, for a
    ternary model, ``p_neutral`` (from :func:`prm.neural.model.score_windows`'s output)."""
    import numpy as np
    import pandas as pd

    if not windows:
        return pd.DataFrame({"traj_id": [], "t": [], "target": [], "score": []})
    stacked = np.concatenate(probs)
    frame = pd.DataFrame({
        "traj_id": np.repeat([w.traj_id for w in windows], [len(w.step_ts) for w in windows]),
        "t": np.concatenate([np.asarray(w.step_ts, dtype=np.int64) for w in windows]),
        "target": np.array([x for w in windows for x in w.targets], dtype=float),
        "score": good_score(stacked),
    })
    if stacked.ndim == 2:
        frame["p_neutral"] = stacked[:, 1]
    return frame


def score_windows(
    scorer: Any,
    windows: Sequence[Window],
    pad_id: int,
    *,
    device: Any = "cpu",
    batch_tokens: int = 16384,
    progress: Any = None,
) -> list[Any]:
    """Step probabilities of every window, one numpy array per window (:func:`probabilities`).

    Windows are scored in length-sorted token-budget batches; on CUDA under bf16 autocast.
    ``progress``, when given, is called with the number of turns of each batch scored.
    """
    import numpy as np
    import torch

    lengths = [len(w) for w in windows]
    order = sorted(range(len(windows)), key=lambda i: lengths[i])
    out: list[Any] = [None] * len(windows)
    use_cuda = torch.device(device).type == "cuda"
    scorer.eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_cuda):
        for batch_ids in token_budget_batches(lengths, batch_tokens, order):
            batch = collate([windows[i] for i in batch_ids], pad_id).to(device)
            logits = scorer(batch.input_ids, batch.step_mask, batch.actions, batch.turn_index)
            probs = probabilities(logits).float().cpu()
            counts = [len(windows[i].step_ts) for i in batch_ids]
            for i, part in zip(batch_ids, torch.split(probs, counts), strict=True):
                out[i] = part.numpy().astype(np.float64)
            if progress is not None:
                progress(sum(counts))
    return out
