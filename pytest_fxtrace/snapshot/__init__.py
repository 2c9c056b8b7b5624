"""Golden snapshots of generated FX code: naming (``naming.py``), what a snapshot holds
(``normalize.py``), files and the orphan ledger (``storage.py``), comparing (``diff.py``).

Knows nothing about pytest; ``_snapshot_session`` feeds it test ids and reports.

A snapshot is one UTF-8 text file (never imported, executed or unpickled)::

    tests/fx_snapshots/test_models/test_resnet.ResNet.fx.txt

    # pytest-fxtrace snapshot of generated torch.fx code (the lines after the blank line)
    # test: test_models.py::test_resnet
    # model: torchvision.models.resnet.ResNet
    # torch: 2.14.1

    def forward(self, x : torch.Tensor) -> torch.Tensor:
        ...

    # submodules the graph calls (call_module): class and configuration
    conv1: torch.nn.Conv2d(3, 64, kernel_size=(7, 7), stride=(2, 2), padding=(3, 3), bias=False)
    ...
    # tensors the graph reads (get_attr): shape and dtype
    ...

The header is for people reading the file in a review; only the body is compared. The
body lists what the code's ``self.act(x)`` calls (a swapped ``nn.ReLU`` -> ``nn.GELU``
or a resized ``nn.Linear`` is a change in review) and the tensors it reads.
"""

from __future__ import annotations

from pytest_fxtrace.snapshot.diff import (  # noqa: F401
    Diff,
    unified_diff,
)
from pytest_fxtrace.snapshot.naming import (  # noqa: F401
    DEFAULT_DIR,
    HASH_LENGTH,
    MAX_COMPONENT,
    RESERVED_DIRS,
    SUFFIX,
    SnapshotId,
    check_snapshot_dir,
    module_component,
    node_component,
    safe_component,
)
from pytest_fxtrace.snapshot.normalize import (  # noqa: F401
    MODULES_HEADER,
    TENSORS_HEADER,
    class_name,
    configuration,
    default_path_roots,
    describe_graph_targets,
    normalize_code,
    same_code,
    snapshot_body,
    tidy,
)
from pytest_fxtrace.snapshot.storage import (  # noqa: F401
    MAGIC,
    TEMP_PREFIX,
    TEMP_SUFFIX,
    Ledger,
    Snapshot,
    SnapshotFileError,
    find_orphans,
    make_snapshot,
    owner_key,
    parse_snapshot,
    read_snapshot,
    snapshot_files,
    stale_temp_files,
    write_atomic,
)

__all__ = [
    "DEFAULT_DIR",
    "Diff",
    "HASH_LENGTH",
    "Ledger",
    "MAGIC",
    "MAX_COMPONENT",
    "MODULES_HEADER",
    "RESERVED_DIRS",
    "SUFFIX",
    "Snapshot",
    "SnapshotFileError",
    "SnapshotId",
    "TEMP_PREFIX",
    "TEMP_SUFFIX",
    "TENSORS_HEADER",
    "check_snapshot_dir",
    "class_name",
    "configuration",
    "default_path_roots",
    "describe_graph_targets",
    "find_orphans",
    "make_snapshot",
    "module_component",
    "node_component",
    "normalize_code",
    "owner_key",
    "parse_snapshot",
    "read_snapshot",
    "safe_component",
    "same_code",
    "snapshot_body",
    "snapshot_files",
    "stale_temp_files",
    "tidy",
    "unified_diff",
    "write_atomic",
]
