"""torch.export's backend (``backend.py``): its failure's diagnosis (``diagnose.py``),
localization (``localize.py``), dynamic shapes (``shapes.py``) and an exported
program's snapshot text (``code.py``)."""
