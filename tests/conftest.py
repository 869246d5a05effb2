import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch

# Tiny models: one thread is several times faster than two fighting over a busy machine.
torch.set_num_threads(1)
# `--method auto` calibrates once per model and machine: into a folder of this run, not the home's cache
os.environ["JACOBIGEN_CACHE"] = tempfile.mkdtemp(prefix="jacobigen-cache-")
atexit.register(shutil.rmtree, os.environ["JACOBIGEN_CACHE"], ignore_errors=True)  # no run leaves its cache behind
# the training scripts are no package: on the path, so their tests import them as they run
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
