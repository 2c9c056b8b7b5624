"""The models the report tests share: one that traces, one whose submodule does not.

Imported by tests/test_report.py, and copied as the user's ``models.py`` into the
projects of tests/test_report_session.py and tests/test_hooks.py (which append their
own extra models), so the ``# BRANCH`` line is found, not hard-coded.
"""

import torch
from torch import nn


class Good(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.lin(x))


class Block(nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # BRANCH
            return x * 2
        return x


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x):
        return self.block(x) + 1
