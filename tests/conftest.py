import os
import tempfile

import torch

# Tiny models: one thread is several times faster than two fighting over a busy machine.
torch.set_num_threads(1)
# `--method auto` calibrates once per model and machine: into a folder of this run, not the home's cache
os.environ["JACOBIGEN_CACHE"] = tempfile.mkdtemp(prefix="jacobigen-cache-")
