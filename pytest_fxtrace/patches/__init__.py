"""Verified patches (issue 42): for a failing statement, a rewrite of the source that holds it,
shown only once it was checked. Each candidate (``rewrites.py``) is applied to an in-memory
copy of the class's source, the class rebuilt from it in its module's namespace, a copy of the
model (its state as before the call) given the rebuilt class, and then (``verify.py``):

* the patched eager model must answer as the original eager model on the recorded call, its
  buffers and RNG stream included;
* the same check (backend, options, the recorded call) must pass on the patched model.

Only then is it shown, as a unified diff of the file relative to its import root
(``diff.py``), which ``git apply`` and ``patch -p1`` take from that root. The user's files are
never written. Knows no pytest and no backend: the check is run through a callable.
"""

from pytest_fxtrace.patches.verify import PatchTrial, find_patch

__all__ = ["PatchTrial", "find_patch"]
