"""Zoo mode's engine half: the model registries (timm, torchvision, transformers, user registries) and
the check an isolated child process runs. Nothing here imports pytest; the pytest items
live in ``pytest_fxtrace.plugin.zoo``."""
