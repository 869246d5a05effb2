import torch

# Tiny models: one thread is several times faster than two fighting over a busy machine.
torch.set_num_threads(1)
