"""The page at ``/`` in headless Chromium: typed texts give a cosine heatmap and soft tokens per step."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

pytestmark = pytest.mark.integration

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1200,1000",
]


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("needs Debian's chromium and chromium-driver (`make setup` installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*FLAGS, f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def _embed(browser, url: str, texts: list[str], steps: int):
    from selenium.webdriver.common.by import By

    browser.get(url + "/")
    box = browser.find_element(By.ID, "texts")
    box.clear()
    box.send_keys("\n".join(texts))
    steps_box = browser.find_element(By.ID, "steps")
    steps_box.clear()
    steps_box.send_keys(str(steps))
    browser.find_element(By.ID, "embed").click()


def test_typed_texts_render_the_heatmap_and_soft_tokens(served, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    texts = ["A man is playing a guitar.", "Someone plays music on stage.", "The stock market fell today."]
    _embed(browser, served.url, texts, steps=3)
    wait = WebDriverWait(browser, 30)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#heatmap td.cell")) == 9)
    cells = browser.find_elements(By.CSS_SELECTOR, "#heatmap td.cell")
    got = np.array([float(c.get_attribute("data-value")) for c in cells]).reshape(3, 3)
    vectors = served.reference.encode(texts, steps=3)
    np.testing.assert_allclose(got, vectors @ vectors.T, atol=1e-4)
    assert [cells[i * 4].text for i in range(3)] == ["1.00"] * 3  # the diagonal
    assert cells[1].value_of_css_property("background-color") != cells[0].value_of_css_property("background-color")

    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#soft-tokens .step")) == 3)
    expected = served.reference.inspect(texts[0], steps=3, top=6)
    for row, step in zip(browser.find_elements(By.CSS_SELECTOR, "#soft-tokens .step"), expected, strict=True):
        chips = row.find_elements(By.CSS_SELECTOR, ".tok")
        assert [c.get_attribute("data-token") for c in chips] == [t for t, _ in step.tokens]
    assert "3 texts" in browser.find_element(By.ID, "status").text
    if os.environ.get("GENEMBED_SCREENSHOT"):
        browser.save_screenshot(os.environ["GENEMBED_SCREENSHOT"])


def test_server_errors_show_on_the_page(served, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _embed(browser, served.url, ["one text"], steps=99)
    status = browser.find_element(By.ID, "status")
    WebDriverWait(browser, 30).until(lambda d: "error" in status.get_attribute("class"))
    assert "max_steps=20" in status.text
    assert browser.find_elements(By.CSS_SELECTOR, "#heatmap td.cell") == []
