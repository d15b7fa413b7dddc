"""The README's promises run as written: its "Your own model and data" section (with "Widgets in your own
loop") is executed as one script, in a fresh interpreter, exactly as a user would paste it."""

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


def test_the_your_own_model_and_data_section_runs_as_written(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", _section("Your own model and data"), flags=re.S)
    assert len(blocks) == 4, "the section's examples changed: update this test"
    script = tmp_path / "readme_example.py"
    # Under `if __name__ == "__main__"` as a script would be (launch forks; nothing re-imports the script)
    script.write_text("\n".join(blocks))
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [line for line in done.stdout.splitlines() if not line.startswith(("launch:", "LossPlot("))]
    assert re.fullmatch(r"\{'loss': [\d.]+, 'accuracy': 0\.9\d*, 'f1': 0\.9\d*\}", lines[0]), lines[0]
    steps, accuracy = lines[1].split()
    assert steps == "39" and float(accuracy) > 0.9  # 400 samples per rank: 13 batches of 32, 3 epochs
    assert re.fullmatch(r"\{'loss': [\d.]+, 'accuracy': 0\.\d+, 'confidence': 0\.\d+\}", lines[2]), lines[2]
    assert lines[-1] == "{'run 1 train': 75, 'run 1 val': 3, 'run 1 val accuracy': 3}"
