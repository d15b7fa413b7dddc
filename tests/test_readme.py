"""The README's promises run as written: its "Your own model and data" example and the page that continues it
(docs/your-own-model-and-data.md, with "Widgets in your own loop") are executed as one script, in a fresh
interpreter of the venv the built wheel was installed into (tests/installed_wheel.py), exactly as a user
would paste them; the README stays short (≤ 200 lines) and its links lead to files that exist."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _section(title: str) -> str:
    text = (REPO / "README.md").read_text()
    start = text.index(f"## {title}\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def test_the_readme_is_short_and_its_links_and_the_docs_links_lead_somewhere():
    assert len((REPO / "README.md").read_text().splitlines()) <= 200
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    links = [
        (page, link)
        for page in pages
        for link in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text())  # relative links only
    ]
    assert len(links) >= 15
    broken = [f"{page.name}: {link}" for page, link in links if not (page.parent / link).exists()]
    assert broken == []


def test_the_your_own_model_and_data_section_runs_as_written(tmp_path, installed_wheel):
    blocks = re.findall(r"```python\n(.*?)```", _section("Your own model and data"), flags=re.S)
    further = (REPO / "docs" / "your-own-model-and-data.md").read_text()
    blocks += re.findall(r"```python\n(.*?)```", further, flags=re.S)
    assert len(blocks) == 4, "the section's examples changed: update this test"
    script = tmp_path / "readme_example.py"
    # Under `if __name__ == "__main__"` as a script would be (launch forks; nothing re-imports the script)
    script.write_text("\n".join(blocks))
    done = subprocess.run(
        [installed_wheel.python, str(script)],
        cwd=tmp_path,
        env=installed_wheel.env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    # launch's own lines: what runs where, its progress bar (one line that updates with \r) and how it ended
    progress = re.compile(r"^launch:|^LossPlot\(|\| *\d+/\d+ \[|^finished at step \d+$|^\s*$")
    lines = [line for line in done.stdout.splitlines() if not progress.search(line)]
    assert re.fullmatch(r"\{'loss': [\d.]+, 'accuracy': 0\.9\d*, 'f1': 0\.9\d*\}", lines[0]), lines[0]
    steps, accuracy = lines[1].split()
    assert steps == "39" and float(accuracy) > 0.9  # 400 samples per rank: 13 batches of 32, 3 epochs
    assert re.fullmatch(r"\{'loss': [\d.]+, 'accuracy': 0\.\d+, 'confidence': 0\.\d+\}", lines[2]), lines[2]
    assert lines[-1] == "{'run 1 train': 75, 'run 1 val': 3, 'run 1 val accuracy': 3}"


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get_json(url: str, body: dict | None = None, timeout_s: float = 120.0):
    """The JSON at `url` (POSTing `body` when given), retried while the server starts."""
    import json
    import time
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while True:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_the_compare_and_share_commands_open_a_run_trained_with_both_loggers(tmp_path):
    """`workbench train --log tensorboard --log mlflow`, then docs/training.md's two commands as written
    (plus a free --port): each tool's web API lists the run."""
    import shlex

    text = (REPO / "docs" / "training.md").read_text()
    start = text.index("## Compare and share runs\n")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end >= 0 else len(text)]
    [block] = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    commands = [shlex.split(line) for line in block.strip().splitlines()]
    assert [Path(c[0]).name for c in commands] == ["tensorboard", "mlflow"], block
    bin_dir = Path(sys.executable).parent
    train = [str(bin_dir / "workbench"), "train", "digits-mlp", "--epochs", "1", "--run", "shared"]
    done = subprocess.run(
        [*train, "--log", "tensorboard", "--log", "mlflow"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    servers = []
    try:
        ports = []
        for command in commands:
            ports.append(_free_port())
            argv = [str(bin_dir / Path(command[0]).name), *command[1:], "--port", str(ports[-1])]
            servers.append(
                subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
        tensorboard, mlflow = (f"http://127.0.0.1:{port}" for port in ports)
        assert _get_json(f"{tensorboard}/data/runs") == ["shared"]
        experiment = _get_json(f"{mlflow}/api/2.0/mlflow/experiments/get-by-name?experiment_name=workbench")
        runs = _get_json(
            f"{mlflow}/api/2.0/mlflow/runs/search",
            {"experiment_ids": [experiment["experiment"]["experiment_id"]]},
        )["runs"]
        assert [run["info"]["run_name"] for run in runs] == ["shared"]
        assert runs[0]["info"]["status"] == "FINISHED"
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=30)
