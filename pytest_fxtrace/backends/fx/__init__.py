"""torch.fx's backend: symbolic tracing with the configured tracer (``tracer.py``), its
failure's diagnosis and localization (``localize.py``), the verified fixes it tries
(``fixes.py``), and the detectors that name the cause of a traced/eager mismatch
(``mismatch.py``, ``divergence.py``, ``detectors.py``)."""
