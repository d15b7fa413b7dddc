"""`workbench train`: presets with a progress bar, final metrics, clear errors, the targets of the issue."""

import subprocess
import sys

import pytest
import torch

from workbench.cli import main
from workbench.train import read_metrics


def test_list_shows_every_preset(capsys):
    assert main(["train", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("digits-mlp", "regression-linear", "images-cnn"))


def test_options_without_a_preset_are_an_error_that_shows_where_it_goes(capsys):
    """`workbench train --run a --resume` printed the list and exited 0: a script took it for success."""
    assert main(["train", "--run", "a", "--resume"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "error: no preset named in `workbench train --run a --resume`" in err
    assert "`workbench train PRESET [options]`" in err and "digits-mlp" in err


def test_a_run_keeps_its_command_for_a_resume_without_the_preset_and_a_refused_start_leaves_it(
    tmp_path, capsys
):
    import json

    runs, record = str(tmp_path), tmp_path / "a" / "command.json"
    assert (
        main(["train", "digits-mlp", "--epochs", "1", "--lr", "0.01", "--run", "a", "--runs-dir", runs]) == 0
    )
    kept = ["train", "digits-mlp", "--epochs", "1", "--lr", "0.01", "--run", "a", "--runs-dir", runs]
    assert json.loads(record.read_text()) == {"argv": kept, "launcher": None}
    assert main(["train", "images-cnn", "--run", "a", "--runs-dir", runs]) == 2  # the name holds a run
    assert json.loads(record.read_text())["argv"] == kept
    capsys.readouterr()
    assert main(["train", "--run", "a", "--runs-dir", runs, "--resume", "--epochs", "2"]) == 0
    out, err = capsys.readouterr()
    assert err.startswith(
        f"workbench train: resuming as `workbench {' '.join(kept[:3])} 2 {' '.join(kept[4:])}"
    )
    assert "finished: 46 steps, 2 epochs" in out  # digits-mlp, lr 0.01, on from its first epoch
    assert json.loads(record.read_text())["argv"] == [*kept[:3], "2", *kept[4:]]  # as short as before
    record.write_text('{"argv": ["tra')  # torn, or written by hand
    assert main(["train", "--run", "a", "--runs-dir", runs, "--resume", "--epochs", "3"]) == 2
    assert "(run 'a' in " + runs + " holds no command to go on with" in capsys.readouterr().err


def test_the_list_and_a_misspelt_preset_answer_without_importing_torch():
    """A person's first commands: the list, then a typo; each once took ~3.5 s to import torch first."""
    said = subprocess.run(
        [sys.executable, "-c", _WITHOUT_TORCH], capture_output=True, text=True, timeout=60, check=True
    )
    outcomes = [line for line in said.stdout.splitlines() if line.startswith("exit ")]
    assert outcomes == ["exit 0, torch False", "exit 2, torch False"], said.stdout + said.stderr
    assert "preset='digit-mlp' is not known; did you mean 'digits-mlp'?" in said.stderr


_WITHOUT_TORCH = """
import sys
from workbench.cli import main
for argv in (["train", "--list"], ["train", "digit-mlp", "--epochs", "1"]):
    code = main(argv)
    print(f"exit {code}, torch {'torch' in sys.modules}", flush=True)
"""


def test_digits_mlp_reaches_95_percent_test_accuracy(tmp_path, capsys):
    assert main(["train", "digits-mlp", "--run", "d", "--runs-dir", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    accuracy = next(
        float(line.split()[-1]) for line in out.splitlines() if line.startswith("test   accuracy")
    )
    assert accuracy >= 0.95
    assert "finished: 460 steps, 20 epochs" in out and "checkpoint" in out
    assert "finished at step 460" in err  # the tqdm fallback writes to stderr
    # stderr is a file here (`2> train.log`, a batch job's output): lines, no carriage returns
    assert "\r" not in err and "epoch 19 val: loss" in err and "| 460/460 [" in err, err[-2000:]
    assert read_metrics(tmp_path / "d", kind="fit_end")[0]["test"]["accuracy"] == pytest.approx(
        accuracy, abs=1e-5
    )


def test_linear_regression_reaches_test_mse_below_0_02(capsys):
    assert main(["train", "regression-linear"]) == 0
    out = capsys.readouterr().out
    mse = next(float(line.split()[-1]) for line in out.splitlines() if line.startswith("test   loss"))
    assert mse <= 0.02


def test_resume_continues_a_stopped_run(tmp_path, capsys):
    args = ["train", "digits-mlp", "--run", "r", "--runs-dir", str(tmp_path)]
    assert main([*args, "--epochs", "2"]) == 0
    assert main([*args, "--epochs", "3", "--resume"]) == 0
    assert "finished: 69 steps, 3 epochs" in capsys.readouterr().out
    assert [e["start_step"] for e in read_metrics(tmp_path / "r", kind="fit_start")] == [0, 46]


def test_ema_decay_trains_a_run_whose_config_and_checkpoint_keep_the_average(tmp_path, capsys):
    import json

    args = ["train", "digits-mlp", "--epochs", "2", "--ema-decay", "0.99", "--run", "e", "--runs-dir"]
    assert main([*args, str(tmp_path)]) == 0
    assert json.loads((tmp_path / "e" / "config.json").read_text())["ema_decay"] == 0.99
    saved = torch.load(tmp_path / "e" / "checkpoint.pt", weights_only=True)
    assert (
        saved["weight_average"]["updates"] == 46
        and saved["weight_average"]["model"].keys() == saved["model"].keys()
    )


def test_activation_checkpointing_recomputes_the_transformer_s_blocks_and_keeps_the_choice_in_the_run(
    tmp_path, capsys
):
    import json

    args = ["train", "text-transformer", "--epochs", "1", "--n-samples", "256", "--runs-dir", str(tmp_path)]
    assert main([*args, "--run", "plain"]) == 0
    assert main([*args, "--run", "ac", "--activation-checkpointing", "TransformerBlock"]) == 0
    config = json.loads((tmp_path / "ac" / "config.json").read_text())
    assert config["activation_checkpointing"] == ["TransformerBlock"]
    plain, recomputed = (read_metrics(tmp_path / run, kind="eval")[-1] for run in ("plain", "ac"))
    assert recomputed["loss"] == plain["loss"]  # the same results, recomputed or kept


def test_a_second_fresh_run_under_the_same_name_is_refused_unless_overwrite(tmp_path, capsys):
    args = ["train", "regression-linear", "--epochs", "1", "--run", "r", "--runs-dir", str(tmp_path)]
    assert main(args) == 0
    log = (tmp_path / "r" / "metrics.jsonl").read_text()
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("workbench train: error: the run 'r' already holds a run") and "--overwrite" in err
    assert (tmp_path / "r" / "metrics.jsonl").read_text() == log  # nothing rewritten
    assert main([*args, "--overwrite"]) == 0


@pytest.mark.parametrize(
    ("restart_count", "said"),
    [("TORCHELASTIC_RESTART_COUNT", "torchrun job"), ("SLURM_RESTART_COUNT", "Slurm job (requeued)")],
)
def test_a_restart_before_the_first_checkpoint_starts_over(
    tmp_path, capsys, monkeypatch, restart_count, said
):
    """torchrun restarting its workers, or Slurm a requeued job (preempted, a node lost), runs the same
    command with --resume again: where the first try saved nothing, it starts over instead of failing."""
    args = ["train", "regression-linear", "--epochs", "1", "--run", "r", "--runs-dir", str(tmp_path)]
    args.append("--resume")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "metrics.jsonl").write_text('{"event": "fit_start", "start_step": 0}\n')  # died unsaved
    assert main(args) == 2  # typed by hand, --resume on a run that never saved is refused: its log is kept
    assert "nothing to resume" in capsys.readouterr().err
    monkeypatch.setenv(
        restart_count, "1"
    )  # what torchrun sets when it restarts the workers, Slurm on requeue
    assert main(args) == 0
    err = capsys.readouterr().err
    assert f"restart 1 of this {said}, and no checkpoint was saved before it: training starts" in err
    assert [e["start_step"] for e in read_metrics(tmp_path / "r", kind="fit_start")] == [0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--lr", "-1"], "lr must be a finite number > 0"),
        (["--batch-size", "0"], "batch_size must be an integer in 1.."),
        (["--threads", "0"], "--threads must be ≥ 1"),
        (["--n-samples", "-5"], "n_samples"),
        (["--ema-decay", "1"], "ema_decay must be a finite number > 0 and < 1, got 1.0"),
        (["--activation-checkpointing", "blocks"], "found no repeated block in this Sequential"),
    ],
)
def test_bad_values_exit_2_with_the_field_named(args, message, capsys):
    preset = "regression-linear" if "--n-samples" in args else "digits-mlp"
    assert main(["train", preset, *args]) == 2
    assert message in capsys.readouterr().err


def test_unknown_preset_and_precision_are_usage_errors():
    errors = []
    for args in (["nope"], ["digits"], ["digits-mlp", "--precision", "fp8"]):
        done = subprocess.run(
            [sys.executable, "-m", "workbench", "train", *args], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 2
        errors.append(done.stderr)
    assert "preset='nope' is not known; allowed values: 'digits-mlp'," in errors[0]
    assert "preset='digits' is not known; did you mean 'digits-mlp'? allowed values:" in errors[1]


def test_ddp_prints_the_torchrun_command_for_several_machines(capsys):
    argv = ["train", "digits-mlp", "--strategy", "ddp", "--nnodes", "3", "--nproc-per-node", "4"]
    argv += ["--master-addr", "node0.cluster", "--epochs", "5", "--run", "big"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "each of the 3 machines; node0.cluster must be reachable" in out
    for part in ("--nnodes 3", "--nproc-per-node 4", "--rdzv-endpoint node0.cluster:29500", "--rdzv-id big"):
        assert part in out
    assert out.rstrip().endswith("train digits-mlp --epochs 5 --run-name big --strategy ddp")


def test_ddp_on_one_machine_launches_local_processes(tmp_path, capsys):
    argv = ["train", "regression-linear", "--strategy", "ddp", "--nproc-per-node", "2", "--n-samples", "4000"]
    assert main([*argv, "--epochs", "2", "--run", "local", "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "launch: 2 processes (gloo, CPU, 1 thread each)" in out
    assert read_metrics(tmp_path / "local", kind="fit_start")[0]["world_size"] == 2


def test_a_global_batch_is_shared_by_the_ranks_and_passed_on_to_the_torchrun_command(tmp_path, capsys):
    argv = ["train", "regression-linear", "--strategy", "ddp", "--nproc-per-node", "2", "--n-samples", "4000"]
    assert main([*argv, "--global-batch-size", "512", "--run", "shared", "--runs-dir", str(tmp_path)]) == 0
    start = read_metrics(tmp_path / "shared", kind="fit_start")[0]
    assert (start["world_size"], start["config"]["batch_size"]) == (2, 256)
    capsys.readouterr()
    assert main(["train", "digits-mlp", "--strategy", "fsdp", "--nnodes", "2", "--master-addr", "node0",
                 "--global-batch-size", "64"]) == 0  # fmt: skip
    printed = capsys.readouterr().out.rstrip()
    assert printed.endswith("train digits-mlp --global-batch-size 64 --strategy fsdp")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--strategy", "pipeline", "--global-batch-size", "64"], "--global-batch-size is for --strategy"),
        (["--strategy", "ddp", "--global-batch-size", "64", "--batch-size", "32"], "give --batch-size (per"),
        (["--strategy", "ddp", "--nproc-per-node", "3", "--global-batch-size", "64"],
         "--global-batch-size 64 does not split evenly over 3 ranks; give a multiple of 3"),
    ],
)  # fmt: skip
def test_a_global_batch_that_cannot_be_shared_is_refused_before_anything_starts(argv, message, capsys):
    assert main(["train", "digits-mlp", *argv]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--nproc-per-node", "--nnodes"])
def test_ddp_refuses_fewer_than_one(flag, capsys):
    assert main(["train", "digits-mlp", "--strategy", "ddp", flag, "0"]) == 2
    assert f"{flag} must be ≥ 1, got 0" in capsys.readouterr().err


def test_a_composition_trains_the_transformer_on_4_local_processes_from_the_command_line(capfd):
    argv = ["train", "text-transformer", "--strategy", "fsdp+tp", "--tp", "2", "--nproc-per-node", "4"]
    assert main([*argv, "--epochs", "1", "--n-samples", "512"]) == 0
    last = capfd.readouterr().out.splitlines()[-1]
    assert last.startswith("finished: 7 steps, 1 epochs in ")  # 409 samples, 32 per data shard, 2 shards
    assert last.endswith(
        "on 4 processes (gloo, cpu, 1 thread each), FSDP × tensor parallel, tensor-parallel groups of 2"
    )


@pytest.mark.parametrize("strategy", ["pipeline", "tensor", "fsdp"])
def test_model_parallel_strategies_train_the_transformer_on_local_processes(strategy, capfd):
    argv = ["train", "text-transformer", "--strategy", strategy, "--epochs", "1", "--n-samples", "512"]
    assert main(argv) == 0
    out = capfd.readouterr().out  # rank 0 prints the table from its own process
    label = {"pipeline": "pipeline (1F1B, 4 micro-batches)", "tensor": "tensor parallel", "fsdp": "FSDP"}
    assert f"launch: 2 processes (gloo, CPU, 1 thread each), {label[strategy]} on 127.0.0.1:" in out
    steps = 7 if strategy == "fsdp" else 13  # 409 training samples: 32 per step, or 32 per rank per step
    assert out.splitlines()[-1].startswith(f"finished: {steps} steps, 1 epochs in ")
    assert out.splitlines()[-1].endswith(f"on 2 processes (gloo, cpu, 1 thread each), {label[strategy]}")


def test_a_bad_split_point_is_refused_before_any_process_starts(capsys):
    argv = ["train", "text-transformer", "--strategy", "pipeline", "--split-points", "block1,block7"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "split point 'block7' names no layer of the model; its top-level layers are: embed, block0" in err


def test_the_torchrun_command_keeps_the_strategy_and_its_options(capsys):
    argv = [
        "train",
        "text-transformer",
        "--strategy",
        "pipeline",
        "--pipeline-schedule",
        "gpipe",
        "--nnodes",
        "2",
    ]
    argv += ["--nproc-per-node", "1", "--master-addr", "node0"]
    assert main(argv) == 0
    assert (
        capsys.readouterr()
        .out.rstrip()
        .endswith("train text-transformer --pipeline-schedule gpipe --strategy pipeline")
    )


def test_backend_is_chosen_on_the_command_line_and_kept_in_the_torchrun_command(capsys):
    argv = ["train", "digits-mlp", "--strategy", "ddp", "--nproc-per-node", "2", "--backend", "nccl"]
    if torch.cuda.device_count() < 2:  # nccl needs a GPU per process: refused before anything starts
        assert main(argv) == 2
        assert "nprocs=2 but torch sees" in capsys.readouterr().err
    assert main([*argv[:-1], "gloo", "--nnodes", "2", "--master-addr", "node0"]) == 0
    assert "--backend gloo" in capsys.readouterr().out


def test_the_printed_command_pasted_on_one_machine_of_two_stops_after_the_join_timeout(tmp_path, free_port):
    """What a user does: print the command, paste it into a shell; the second machine never comes."""
    import os
    import time

    argv = ["train", "digits-mlp", "--strategy", "ddp", "--nnodes", "2", "--nproc-per-node", "1"]
    argv += ["--master-addr", "127.0.0.1", "--master-port", str(free_port()), "--join-timeout", "5"]
    printed = subprocess.run([sys.executable, "-m", "workbench", *argv], capture_output=True, text=True)
    assert printed.returncode == 0, printed.stderr
    assert "the run waits 5 s for every machine to join" in printed.stdout
    path = f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"  # the venv's `workbench`
    started = time.monotonic()
    pasted = subprocess.run(
        ["bash", "-c", printed.stdout],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PATH": path},
    )
    assert pasted.returncode == 2 and "Traceback" not in pasted.stderr, pasted.stderr
    assert "error: not all 2 machines joined the rendezvous at 127.0.0.1:" in pasted.stderr
    assert "within 5 s; run the same command on each machine" in pasted.stderr
    assert time.monotonic() - started < 5 + 30  # not torchrun's default of 600 s


def test_the_printed_command_with_a_global_batch_pasted_into_a_shell_trains_with_each_ranks_share(
    tmp_path, free_port
):
    import os

    argv = ["train", "digits-mlp", "--strategy", "ddp", "--nnodes", "1", "--nproc-per-node", "2"]
    argv += ["--master-addr", "127.0.0.1", "--master-port", str(free_port()), "--global-batch-size", "64"]
    argv += ["--epochs", "1", "--threads", "1", "--run-name", "g", "--runs-dir", str(tmp_path)]
    argv.append("--print-command")
    printed = subprocess.run([sys.executable, "-m", "workbench", *argv], capture_output=True, text=True)
    assert printed.returncode == 0, printed.stderr
    path = f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"  # the venv's `workbench`
    pasted = subprocess.run(["bash", "-c", printed.stdout], capture_output=True, text=True,
                            env={**os.environ, "PATH": path}, timeout=240)  # fmt: skip
    assert pasted.returncode == 0, pasted.stderr
    start = read_metrics(tmp_path / "g", kind="fit_start")[0]
    assert (start["world_size"], start["config"]["batch_size"]) == (2, 32)


def test_compile_trains_compiled_and_reports_the_compile_apart(tmp_path, capsys):
    torch.compiler.reset()  # graphs of the same shapes compiled by an earlier test would be reused
    args = ["train", "digits-mlp", "--epochs", "1", "--compile", "default", "--run", "c"]
    assert main([*args, "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "compiled in " in out and " graphs, 0 graph breaks" in out
    steps = read_metrics(tmp_path / "c", kind="step")
    assert steps and all(step["compile"]["seconds"] > 0 for step in steps)
    assert read_metrics(tmp_path / "c", kind="fit_end")[0]["compile"]["graphs"] >= 1


def test_an_ipv6_master_addr_is_bracketed_in_the_printed_endpoint(capsys):
    """`::1:29500` is no endpoint torchrun can split; `[::1]:29500` is (issue 44)."""
    from workbench import cli

    argv = ["train", "digits-mlp", "--strategy", "ddp", "--nnodes", "2", "--master-addr", "::1"]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "--rdzv-endpoint '[::1]:29500'" in printed
    from workbench.parallel.launching.torchrun_args import endpoint_host

    assert endpoint_host("[::1]:29500") == "::1" and endpoint_host("node0:29500") == "node0"


def test_a_runs_dir_with_a_tilde_is_the_home_folder(tmp_path, monkeypatch):
    from workbench.train.run_dir import RunDir

    monkeypatch.setenv("HOME", str(tmp_path))
    assert RunDir.named("x", runs_dir="~/runs").path == tmp_path / "runs" / "x"


def _workbench(*args: str) -> list[str]:
    """The command line `workbench ARGS` as this interpreter runs it."""
    import sys

    return [sys.executable, "-m", "workbench", *args]


def _wait_for_a_logged_step(process, log) -> None:
    import time

    deadline = time.monotonic() + 120
    while not (log.is_file() and '"event": "step"' in log.read_text()):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.1)


def test_ctrl_c_stops_after_the_step_saves_and_says_so_in_one_line(tmp_path):
    """Ctrl-C in a terminal: the run stops at a step boundary, saves, logs `stopped` and prints one line
    (issue 44: it printed a KeyboardInterrupt traceback, exited -2, logged `failed` and lost the epoch)."""
    import json
    import signal
    import subprocess

    command = _workbench("train", "digits-mlp", "--epochs", "500", "--run", "x")
    process = subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    log = tmp_path / "runs" / "x" / "metrics.jsonl"
    _wait_for_a_logged_step(process, log)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("workbench train: stopped at step ") and last.endswith(
        "(Ctrl-C); checkpoint runs/x/checkpoint.pt: continue with --resume"
    ), err
    end = json.loads(log.read_text().splitlines()[-1])
    assert (end["event"], end["status"]) == ("fit_end", "stopped")
    assert (tmp_path / "runs" / "x" / "checkpoint.pt").is_file()


def test_a_diverging_run_ends_with_the_reason_not_a_traceback(tmp_path):
    """Issue 44: the NonFiniteLossError reached the terminal as a traceback."""
    import subprocess

    command = _workbench("train", "regression-linear", "--lr", "1000", "--epochs", "2")
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "\r" not in done.stderr  # its progress, written to a pipe: lines, no carriage-return redraws
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("workbench train: error: training loss became inf in steps ")
    assert last.endswith("Try a lower lr (now 1000) or clipping (clip_norm).")


def _ignore_sigint() -> None:
    """What a non-interactive shell does to a job it starts with `&` (and nohup, some batch systems)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("how", ["alone", "started with & (SIGINT ignored)", "--strategy ddp"])
def test_sigterm_stops_after_the_step_saves_and_exits_143(tmp_path, how):
    """Slurm's time limit and scancel, Kubernetes, docker stop and systemd end a job with SIGTERM, then
    SIGKILL some seconds later. The command died at once, mid-epoch, its last checkpoint up to an epoch
    old and no end logged; now SIGTERM is a stop request as Ctrl-C is. Kubernetes and docker signal the
    container's first process only: with --strategy ddp, the launcher, which stops its workers together."""
    import json
    import signal

    extra = ["--strategy", "ddp"] if how == "--strategy ddp" else []
    command = _workbench("train", "digits-mlp", "--epochs", "500", "--run", "t", *extra)
    process = subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_ignore_sigint if how.startswith("started with &") else None,
    )  # fmt: skip
    log = tmp_path / "runs" / "t" / "metrics.jsonl"
    _wait_for_a_logged_step(process, log)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 143 and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("workbench train: stopped at step ") and last.endswith(
        "(SIGTERM); checkpoint runs/t/checkpoint.pt: continue with --resume"
    ), err
    assert "(SIGTERM again: quit without saving)" in out or "(SIGTERM again, or" in out, out
    end = json.loads(log.read_text().splitlines()[-1])
    assert (end["event"], end["status"], end["step"]) == ("fit_end", "stopped", int(last.split()[5]))
    assert (tmp_path / "runs" / "t" / "checkpoint.pt").is_file()


def test_a_worker_killed_under_the_command_is_named_without_a_traceback(tmp_path):
    """Issue 44: a SIGKILLed rank of `workbench train --strategy ddp` ended in a WorkerFailed traceback."""
    import signal
    import subprocess

    import psutil

    command = _workbench("train", "digits-mlp", "--strategy", "ddp", "--epochs", "500", "--run", "k")
    process = subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    _wait_for_a_logged_step(process, tmp_path / "runs" / "k" / "metrics.jsonl")
    workers = [p for p in psutil.Process(process.pid).children(recursive=True) if p.ppid() != process.pid]
    assert len(workers) == 2, workers  # the fork server's two children
    max(workers, key=lambda p: p.pid).send_signal(signal.SIGKILL)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 1 and "Traceback" not in err, err
    assert "workbench train: error: rank " in err and "of 2 failed: killed by SIGKILL" in err
    assert err.strip().endswith("all 2 workers were stopped; launch again when fixed")


def test_a_killed_command_resumes_from_its_last_checkpoint_and_reads_as_one_run(tmp_path):
    """The OOM killer or a lost node ends `workbench train` with SIGKILL: nothing runs, no fit_end is
    written, the log's buffer reaches the disk wherever it had filled. The person then pastes the command
    `workbench runs` prints: it continues from the last checkpoint and the run reads as one run."""
    import shlex
    import signal
    import time
    import warnings

    run = tmp_path / "runs" / "k"
    command = _workbench("train", "digits-mlp", "--run", "k", "--checkpoint-every-steps", "10")
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (run / "checkpoint.pt").is_file():  # killed right after its first checkpoint, mid-fit
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)
    with (run / "metrics.jsonl").open("a") as log:  # what a kill mid-write leaves, when it does
        log.write('{"event": "step", "step": 11, "lo')
    listed = subprocess.run(_workbench("runs"), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    row, footer = listed.stdout.splitlines()[-4], listed.stdout.splitlines()[-1]
    assert "killed" in row and footer == "  k: workbench train --run k --resume", listed.stdout

    printed = shlex.split(footer.split(": ", 1)[1])  # pasted as printed: the run knows its preset and options
    done = subprocess.run(_workbench(*printed[1:]), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    said, _, rest = done.stderr.partition("\n")
    kept = "workbench train digits-mlp --checkpoint-every-steps 10 --run k --resume"
    assert said == f"workbench train: resuming as `{kept}`", done.stderr
    done.stderr = rest
    resumed_at = read_metrics(run, kind="fit_start")[-1]["start_step"]
    assert resumed_at % 10 == 0 and 0 < resumed_at < 460, resumed_at  # a checkpoint's step, not the kill's
    assert done.stderr.startswith(f"resumed from the checkpoint at step {resumed_at} of 460\n"), done.stderr
    assert "finished: 460 steps, 20 epochs" in done.stdout
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no malformed line: the torn one was cut before the resume wrote
        steps = [event["step"] for event in read_metrics(run, kind="step")]
    assert steps == sorted(set(steps)) and steps[-1] == 460  # each step once, in order
    listed = subprocess.run(_workbench("runs"), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert "finished" in listed.stdout.splitlines()[-1] and "killed" not in listed.stdout, listed.stdout
    assert "--resume" not in listed.stdout  # finished: nothing to go on with


def test_compile_without_a_compiler_is_one_line_from_the_command(tmp_path):
    import os
    import subprocess

    command = _workbench("train", "digits-mlp", "--epochs", "1", "--compile", "default")
    env = {**os.environ, "CXX": str(tmp_path / "no-such-g++")}
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith("workbench train: error: compile='default' needs the C++ compiler CXX=")
    )


def test_a_composition_is_checked_against_the_ranks_and_its_size_kept_in_the_torchrun_command(capsys):
    argv = ["train", "digits-mlp", "--strategy", "ddp+tp", "--tp", "3", "--nproc-per-node", "4"]
    assert main(argv) == 2
    assert "'ddp+tp' with tp=3 needs a number of ranks divisible by 3, got 4" in capsys.readouterr().err
    argv = ["train", "digits-mlp", "--strategy", "fsdp+tp", "--tp", "2", "--nnodes", "2", "--nproc-per-node"]
    # 4 ranks make 2 data shards (tensor-parallel pairs): 66 samples split evenly over them, not over 4 ranks
    assert main([*argv, "2", "--global-batch-size", "66", "--master-addr", "node0"]) == 0
    command = capsys.readouterr().out.rstrip()
    assert command.endswith("train digits-mlp --tp 2 --global-batch-size 66 --strategy fsdp+tp")


def test_a_worker_failure_prints_its_whole_summary_even_when_another_ranks_error_holds_a_blank_line(
    capsys, monkeypatch
):
    """gloo's error for the rank left waiting has a blank line in it; the line cut there lost the end."""
    from workbench.parallel import WorkerFailed

    summary = "rank 1 of 2 failed: killed by SIGKILL\nthen rank 0: DistBackendError: a\n\nb\n"
    summary += "all 2 workers were stopped; launch again when fixed"

    def fail(args):
        raise WorkerFailed(
            f"{summary}\n\nrank 1 traceback:\nTraceback (most recent call last): ...", 1, summary
        )

    monkeypatch.setattr("workbench.cli.train.train_distributed", fail)
    assert main(["train", "digits-mlp", "--strategy", "ddp"]) == 1
    err = capsys.readouterr().err
    assert err == f"workbench train: error: {summary}\n"


def test_spark_ranks_get_the_collective_timeout_given(monkeypatch):
    """--collective-timeout reached the ranks of torchrun and mpirun but not Spark's, which waited the
    1800 s default for a frozen task."""
    import argparse
    import contextlib

    from workbench.cli import train_distributed
    from workbench.parallel.launching import spark

    given = {}
    monkeypatch.setattr(spark, "spark_session", lambda master: contextlib.nullcontext("session"))
    monkeypatch.setattr(spark, "run_on_spark", lambda fn, n, **options: given.update(options) or 0)
    args = argparse.Namespace(
        spark_master="local[2]", nproc_per_node=2, spark_on_driver=False, backend=None, collective_timeout=42
    )
    assert train_distributed._train_on_spark(args, lambda strategy: 0, strategy=None) == 0
    assert given["timeout_s"] == 42 and given["spark"] == "session"


def test_a_failed_spark_job_is_one_line_with_sparks_reason_and_the_retry():
    """What Py4J raised when a rank's task was killed (its first lines, as Spark 4 words them): the CLI said
    it with a ~60-line Java stack; `spark_failure` keeps Spark's reason and says what to do."""
    from workbench.parallel.launching.spark import spark_failure

    Py4JJavaError = type("Py4JJavaError", (Exception,), {"__module__": "py4j.protocol"})
    said = (
        "An error occurred while calling o47.collectToPython.\n: org.apache.spark.SparkException: Job "
        "aborted due to stage failure: Could not recover from a failed barrier ResultStage. Most recent "
        "failure reason: Stage failed because barrier task ResultTask(0, 1) finished unsuccessfully.\n"
        "org.apache.spark.api.python.PythonException: [PYTHON_EXCEPTION] ...\n\tat org.apache.spark..."
    )
    summary = spark_failure(Py4JJavaError(said))
    assert summary.startswith(
        "the Spark job failed: Stage failed because barrier task ResultTask(0, 1) finished unsuccessfully. "
    )
    assert "\n" not in summary and "--resume" in summary
    assert spark_failure(RuntimeError(said)) is None  # not from Spark: the caller's own error, raised


def test_a_warning_reads_as_a_line_of_the_command_not_as_python_source(tmp_path, capsys):
    """Python showed the CLI's own warnings as `/…/workbench/cli/train_local.py:91: UserWarning: …` and the
    source line under it; another library's warning keeps its kind and origin."""
    import warnings

    from workbench.cli import _warning_line

    argv = ["train", "digits-mlp", "--epochs", "2", "--max-steps", "100", "--runs-dir", str(tmp_path)]
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert main(argv) == 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "warning" in line.lower()]
    assert said == [
        "workbench train: warning: max_steps=100 sets the fit's length (4.35 epochs of 23 steps) in epochs' "
        "place, so epochs=2 (46 steps) does not end it; leave one of them out"
    ], err
    _warning_line("train")("old", FutureWarning, "/site-packages/torch/x.py", 3)
    assert capsys.readouterr().err == (
        "workbench train: warning: old (FutureWarning, /site-packages/torch/x.py:3)\n"
    )


def test_find_lr_prints_the_range_and_a_command_that_trains_at_the_suggestion_when_pasted(tmp_path, capsys):
    """SGD on the digits at batch 256: the preset's lr (3e-3) barely moves it in the preset's epochs; the
    range test's printed command, pasted into a shell, trains it."""
    import shlex

    given = ["train", "digits-mlp", "--find-lr", "--optimizer", "sgd", "--batch-size", "256", "--lr", "0.003"]
    assert main(given) == 0
    out = capsys.readouterr().out
    assert out.startswith("lr        loss") and "smoothed\n" in out.splitlines()[0] + "\n"
    assert "steps, lr 1e-07 to " in out and "(diverged)" in out
    line = next(line for line in out.splitlines() if line.startswith("train at it: "))
    command = shlex.split(line.removeprefix("train at it: "))
    assert command[:3] == ["workbench", "train", "digits-mlp"] and "--optimizer sgd --lr" in line
    assert "--batch-size 256" in line
    assert command.count("--lr") == 1 and "--find-lr" not in command and float(command[-1]) > 0.03
    pasted = subprocess.run(
        [sys.executable, "-m", *command[:1], *command[1:], "--runs-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert pasted.returncode == 0, pasted.stderr[-2000:]
    accuracy = next(line for line in pasted.stdout.splitlines() if line.startswith("val    accuracy"))
    assert float(accuracy.split()[-1]) > 0.85, pasted.stdout


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--run", "a"], "--find-lr takes no --run"),
        (["--strategy", "ddp"], "--strategy ddp (it runs one process)"),
        (["--global-batch-size", "64"], "--global-batch-size acts on several ranks"),
    ],
)
def test_find_lr_refuses_what_a_range_test_cannot_honour(extra, said, capsys):
    assert main(["train", "digits-mlp", "--find-lr", *extra]) == 2
    assert said in capsys.readouterr().err
