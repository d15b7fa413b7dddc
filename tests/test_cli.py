import json
import re
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from workbench.cli import main


def _workbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "workbench", *args], capture_output=True, text=True, timeout=120
    )


def test_doctor_prints_the_table_and_exits_zero():
    done = _workbench("doctor")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["section", "item", "value"] and set(lines[1]) <= {"-", " "}
    assert "numba backend" in done.stdout and "cpu" in done.stdout
    installed = re.escape(version("gpu-training-workbench"))  # not "not installed" (the index's `workbench`)
    assert re.search(rf"^\s*workbench\s+{installed}\s*$", done.stdout, flags=re.M), done.stdout


def test_doctor_json_is_parseable():
    done = _workbench("doctor", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {"cpu", "nvml", "cuda", "packages"} <= set(report)


def test_console_script_is_installed():
    script = shutil.which("workbench", path=str(Path(sys.executable).parent))
    assert script, "the `workbench` console script is not installed next to this interpreter"
    done = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("workbench ")


def test_no_command_prints_help(capsys):
    assert main([]) == 0
    assert "doctor" in capsys.readouterr().out


def test_unknown_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["fly"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'fly'" in capsys.readouterr().err


BAD_BENCH_ARGUMENTS = {
    "trainer": ["--repeats", "0"],
    "kernel-env": ["--repeats", "0"],
    "hardware": ["--repeats", "0"],
    "kernels": ["--repeats", "0"],
    "compile": ["--repeats", "0"],
    "ddp": ["--nprocs", "0"],
    "launch": ["--repeats", "0"],
}


@pytest.mark.parametrize("name", list(BAD_BENCH_ARGUMENTS))
def test_every_benchmark_says_a_bad_argument_in_one_line(name, capsys):
    from workbench.cli.bench import BENCHMARKS

    assert set(BAD_BENCH_ARGUMENTS) == set(BENCHMARKS)  # a new benchmark gets a case here
    assert main(["bench", name, *BAD_BENCH_ARGUMENTS[name]]) == 2
    said = capsys.readouterr().err
    assert said.startswith(f"workbench bench {name}: error: ") and said.count("\n") == 1, said


def test_help_and_commands_that_need_no_training_start_without_importing_torch(tmp_path):
    """`workbench --help`, a typo and `kernel install` answered after ~3.5 s (the parser imported the whole
    training stack, torch included, for the names --optimizer and --compile accept)."""
    code = (
        "import sys\nfrom workbench.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print('torch' in sys.modules)"
    )
    for argv in (["--help"], ["train", "--help"], ["trian"], ["kernel", "install", "--prefix", "/proc/nope"]):
        command = [sys.executable, "-c", code, *argv]
        done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)
        assert done.stdout.splitlines()[-1] == "False", (argv, done.stdout[-500:], done.stderr[-2000:])
