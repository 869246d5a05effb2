import sys
from pathlib import Path

import torch

# Tiny models: one thread is several times faster than two fighting over a busy machine.
torch.set_num_threads(1)
sys.path.insert(0, str(Path(__file__).parent))
