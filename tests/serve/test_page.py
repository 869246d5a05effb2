"""The page at / in a real headless browser: type a prompt, watch the image draw, check its pixels."""

import base64
import io
import os
import shutil

import numpy as np
import pytest
from PIL import Image

from tests.helpers.need import need

from .live import serving

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
MISSING = "chromium is not installed (apt-get install -y chromium chromium-driver)"
if os.environ.get("CI") and not (CHROMIUM and DRIVER):  # .ci/run installs it: a skip there would hide the test
    raise RuntimeError(f"CI is set and {MISSING}")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER), reason=MISSING)


def test_the_page_draws_an_image():
    webdriver = need("selenium.webdriver")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    with serving() as url:
        browser = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=DRIVER))
        try:
            browser.get(url)
            wait = WebDriverWait(browser, 120)
            wait.until(lambda b: len(Select(b.find_element(By.ID, "method")).options) > 1)  # the methods loaded
            prompt = browser.find_element(By.ID, "prompt")
            prompt.clear()
            prompt.send_keys("grinning face")
            Select(browser.find_element(By.ID, "method")).select_by_value("scd-mc")
            browser.find_element(By.ID, "go").click()
            wait.until(lambda b: b.find_element(By.ID, "image").get_attribute("data-done") == "1")
            src = browser.find_element(By.ID, "image").get_attribute("src")
            stats = browser.find_element(By.ID, "stats").text
            corner = browser.execute_script(
                "const c = document.getElementById('map'); return [c.width, c.height,"
                " Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data).some(v => v > 0)];"
            )
        finally:
            browser.quit()
    picture = np.array(Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1]))).convert("RGB"))
    assert picture.shape == (64, 64, 3) and picture.std() > 5  # not blank
    assert '"method": "scd-mc"' in stats and "step_compression" in stats
    assert corner == [16, 16, True]  # the acceptance map is drawn
