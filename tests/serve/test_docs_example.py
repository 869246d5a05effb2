"""The curl example of docs/serving.md works as written (against a test server's port) and makes the
image `jacobigen generate` makes."""

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from .live import offline, serving

DOC = Path(__file__).resolve().parents[2] / "docs" / "serving.md"


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_curl_example_writes_the_offline_image(tmp_path):
    blocks = re.findall(r"```bash\n(.*?)```", DOC.read_text(), re.S)
    example = next(b for b in blocks if b.startswith("curl "))
    with serving(deterministic=True) as url:
        subprocess.run(["bash", "-c", example.replace("http://127.0.0.1:8000", url)], cwd=tmp_path, check=True)
    made = np.array(Image.open(tmp_path / "heart.png"))
    assert np.array_equal(made, offline("red heart", 0, "scd-mc", 16))
