"""The browser tests' fixtures: a JupyterLab server (`lab`) and a headless Chromium page (`page`)."""

from tests.browser.jupyterlab import lab, page

__all__ = ["lab", "page"]
