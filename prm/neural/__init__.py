"""The neural PRM: the network and its scoring (model), its folder written and loaded with every
file checked (folder), a training run set up (setup, run), stepped (loop) and checkpointed
(checkpoints), on one or several processes (distributed, device), and the frozen backbone with
a fitted head (frozen)."""
