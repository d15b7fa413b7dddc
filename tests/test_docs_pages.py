"""Every code block of the docs/ pages runs, or is run by the test named for it.

The Python blocks of a page run in order, as written, in one fresh interpreter in an empty folder, as a
notebook would run them (top-level ``await`` included). A page's block may be a fragment that uses names a
reader has already (a model, two matrices): the page's `GIVEN` defines them first, small. After each block,
`THEN` checks what it promised (a trained result, a product that matches torch). A page that gains or
loses a block fails here until its entry in `BLOCKS` says how that block is tested.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"

# What a reader of the page has in hand before its fragments (a model of theirs, matrices, a batch)
GIVEN = {
    "kernels.md": """
import torch
from workbench.presets import build_experiment
from workbench.train import Trainer
e = build_experiment("digits-mlp", epochs=1)
model, loss_fn, splits, config = e.model, e.loss_fn, e.splits, e.config
a, b = torch.randn(32, 48), torch.randn(48, 16)
logits, targets = torch.randn(8, 10, requires_grad=True), torch.randint(0, 10, (8,))
""",
    "estimates.md": """
import torch
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
""",
}
# Checks after a page's block (page, index among its Python blocks): an expression that must be true
THEN = {
    ("tour.md", 0): "x.shape[1:] == (1, 8, 8) and len(x) <= 64 and str(y.dtype) == 'torch.int64'",
    ("kernels.md", 0): "torch.allclose(c, a @ b, atol=1e-4) and loss.item() > 0 and optimizer is not None",
    ("estimates.md", 0): "True",  # the two widgets built without an error
    ("training.md", 0): "result.status == 'finished' and result.step > 0",
    ("training.md", 1): "trainer.run == 'lr-3e-3' and len(loggers) == 2",
    ("scaling-out.md", 0): "result.status == 'finished' and dashboard.wait().status == 'finished'",
    ("scaling-out.md", 2): "True",  # three launches that finished (an error or a failed rank raises)
}
# Each page's code blocks by language: "run" (here), or the test that runs it, or why no test can
SPARK = "tests/parallel/test_spark.py::test_the_scaling_out_page_runs_its_spark_block_as_written"
MULTI_HOST = "torchrun: tests/parallel/test_torchrun.py; the printed two-node command: test_multi_node.py"
BLOCKS = {
    "tour.md": {"python": ["run"]},
    "estimates.md": {"python": ["run"]},
    "kernels.md": {
        "python": ["run"],
        "bash": ["installs torch: `make lab` as CI runs it, other pins by hand"],
    },
    "training.md": {
        "python": ["run", "run"],
        "bash": [
            "tests/test_readme.py::test_the_compare_and_share_commands_open_a_run_trained_with_both_loggers"
        ],
    },
    "scaling-out.md": {
        "python": ["run", SPARK, "run"],
        "bash": [
            MULTI_HOST,
            "mpirun: tests/parallel/test_mpirun.py, on two hosts test_multi_node.py; srun: test_slurm.py",
            "tests/parallel/test_slurm.py (this sbatch script, submitted to a one-node Slurm)",
            "tests/parallel/test_slurm.py::test_a_job_past_its_time_limit_stops_saved_requeues_itself_and_resumes",
            "two nodes with 4 GPUs each: the commands inside are those of the blocks above",
        ],
        "yaml": ["tests/parallel/test_kubernetes_manifest.py (each pod's command here; no cluster)"],
    },
    "install.md": {"bash": ["`make lab` and `make test`: CI runs them on a fresh machine"]},
    "your-own-model-and-data.md": {
        "python": ["tests/test_readme.py::test_the_your_own_model_and_data_section_runs_as_written"] * 3
    },
}

RUNNER = """
import ast, asyncio, json, sys, torch
for page, blocks, given, checks in json.loads(sys.argv[1]):
    namespace = {"__name__": "__main__"}  # a page of its own: a fresh notebook
    exec(given, namespace)
    for index, block in blocks:
        code = compile(block, f"docs/{page} block {index}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        awaited = eval(code, namespace)
        if asyncio.iscoroutine(awaited):
            asyncio.run(awaited)
        check = checks[str(index)]
        print(json.dumps([page, index, check, bool(eval(check, namespace))]), flush=True)
"""


def code_blocks(page: str) -> dict[str, list[str]]:
    """The page's fenced code blocks, by language."""
    found: dict[str, list[str]] = {}
    for language, body in re.findall(r"^```(\w+)\n(.*?)^```$", (DOCS / page).read_text(), flags=re.S | re.M):
        found.setdefault(language, []).append(body)
    return found


def test_every_docs_page_says_how_each_of_its_code_blocks_is_tested():
    pages = {page.name for page in DOCS.glob("*.md") if code_blocks(page.name)}
    assert pages == set(BLOCKS), "a page gained or lost its code blocks: say how they are tested in BLOCKS"
    for page, languages in BLOCKS.items():
        counts = {language: len(blocks) for language, blocks in code_blocks(page).items()}
        assert counts == {language: len(how) for language, how in languages.items()}, page
        for how in (how for hows in languages.values() for how in hows if "::" in how):
            path, name = how.split(" ")[0].split("::")
            assert f"def {name}(" in (REPO / path).read_text(), f"{page}: no test {how}"


def _blocks_to_run(page: str) -> list[tuple[int, str]]:
    blocks = zip(code_blocks(page).get("python", []), BLOCKS[page].get("python", []), strict=True)
    return [(index, block) for index, (block, how) in enumerate(blocks) if how == "run"]


def test_the_docs_pages_python_blocks_run_as_written(tmp_path):
    pages = [page for page in BLOCKS if _blocks_to_run(page)]
    plan = [
        (page, blocks, GIVEN.get(page, ""), {str(index): THEN[(page, index)] for index, _ in blocks})
        for page in pages
        for blocks in [_blocks_to_run(page)]
    ]
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(plan)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('["')]
    assert [(page, index) for page, index, _, _ in results] == [
        (page, index) for page, blocks, _, _ in plan for index, _ in blocks
    ], done.stdout[-2000:]
    failed = [f"docs/{page} block {index}: {check}" for page, index, check, passed in results if not passed]
    assert failed == []
