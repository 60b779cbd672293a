"""``python -m prm.cli`` (what ``torchrun ... -m prm.cli train ...`` runs)."""

from prm.cli import main

main()
