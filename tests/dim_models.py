"""Tiny models, one per thing the dynamic-shape gate must say of a requested dimension
(issue 39): pinned, constrained, refused, answered otherwise, or dynamic at every size.

Also written into pytester directories as the user's ``dim_models.py``, so the line numbers
reported point here (``line_of`` finds a marked line).
"""

import torch
import torch.nn as nn


def line_of(marker: str) -> int:
    """The line of this file that holds ``marker`` (a comment)."""
    with open(__file__) as source:
        for number, line in enumerate(source, 1):
            if marker in line and "line_of" not in line:
                return number
    raise LookupError(marker)


class LiteralView(nn.Module):
    """``view(4, -1)``: export keeps the batch a symbol but guards it a multiple of 4; eager
    runs every batch whose elements split in four rows."""

    def forward(self, x):
        rows = x.view(4, -1)  # LITERAL-VIEW
        return rows.sum(0)


class FixedTensor(nn.Module):
    """A fixed-size tensor made in ``forward``: the batch is pinned to 8."""

    def forward(self, x):
        return x + torch.ones(8, 16)  # FIXED-TENSOR


class FixedSlice(nn.Module):
    """``self.pos[:, :16]``: the sequence is pinned to 16."""

    def __init__(self):
        super().__init__()
        self.pos = nn.Parameter(torch.randn(1, 64, 16))

    def forward(self, x):
        return x + self.pos[:, :16]  # FIXED-SLICE


class IntOfShape(nn.Module):
    """``int(x.shape[0])``: the size becomes a Python int, the batch pinned."""

    def forward(self, x):
        n = int(x.shape[0])  # INT-SHAPE
        return x.reshape(n, -1) * n


class TableLength(nn.Module):
    """A position table of 32 rows: the sequence may be at most 32 (eager too)."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(32, 16))

    def forward(self, x):
        return x + self.table[: x.shape[1]]  # TABLE-LENGTH


class Divisible(nn.Module):
    """Heads of 4: the sequence must be a multiple of 4 (eager too)."""

    def forward(self, x):
        b, s, d = x.shape
        heads = x.view(b, s // 4, 4, d)  # DIVISIBLE
        return heads.sum(2)


class BatchOneBranch(nn.Module):
    """A branch on a batch of one: export assumes a batch of at least 2, and its program at
    batch 1 returns another shape than eager."""

    def forward(self, x):
        if x.shape[0] == 1:  # BATCH-ONE
            return x.sum(0)
        return x * 2


class CleanConv(nn.Module):
    """A small conv net: batch and image size stay dynamic at every size tried."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.conv(x).relu().mean((2, 3)))


class CleanSequence(nn.Module):
    """Token ids and a mask: batch and sequence stay dynamic at every size tried."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 8)
        self.proj = nn.Linear(8, 8)

    def forward(self, input_ids, attention_mask):
        h = self.proj(self.embed(input_ids))
        mask = attention_mask.unsqueeze(-1).to(h.dtype)
        return (h * mask).sum(1) / mask.sum(1).clamp(min=1)


def tokens(batch=2, seq=6):
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 50, (batch, seq), generator=generator)
    return ids, torch.ones(batch, seq, dtype=torch.long)


class PairView(nn.Module):
    """``view(2, -1)``: recorded at batch 1, exported at 2 (export would fix 1), the program
    keeps the guard ``batch % 2 == 0`` and refuses the recorded call itself."""

    def forward(self, x):
        return x.view(2, -1).sum(0)  # PAIR-VIEW


class Patches(nn.Module):
    """Patches of 128 along the sequence: a multiple of 128, eager too."""

    def forward(self, x):
        b, s, d = x.shape
        return x.view(b, s // 128, 128, d).mean(2)  # PATCHES


class PairedChunk(nn.Module):
    """Two inputs of one batch, joined and split in two (RAFT's feature encoder): export keeps
    the guard ``a + b - (a + b + 1) // 2 != 1`` on both batches, and refuses batch 1."""

    def forward(self, a, b):
        both = torch.cat([a, b], dim=0)
        first, second = torch.chunk(both, 2, dim=0)  # PAIRED-CHUNK
        return first.relu() + second.relu()
