"""The browser tests' fixtures: a JupyterLab server (`lab`), one headless Chromium per module (`browser`),
and a fresh page in it for each test (`page`)."""

from tests.browser.jupyterlab import browser, lab, page

__all__ = ["browser", "lab", "page"]
