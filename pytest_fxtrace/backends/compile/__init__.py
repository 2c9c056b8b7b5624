"""The torch.compile backend (``backend="compile"``): backend.py (capture, run, explain);
session.py (one check's compiled model and what Dynamo did), breaks.py (graph-break sites),
recompiles.py (recompiles in the user's words), verdict.py (the budget and its messages)."""
