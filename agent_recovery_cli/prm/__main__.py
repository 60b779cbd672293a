"""``python -m agent_recovery_cli.prm`` (what ``torchrun ... -m agent_recovery_cli.prm train ...`` runs)."""

from agent_recovery_cli.prm import main

main()
