"""Bad input, table-driven: each case names the exception type and the words its message must hold (the
field, the rule or the fix), through the API and the command line. A case is a reproducer of a wrong
behaviour found by an adversarial pass (issue "Nothing lost, nothing silent"), or one of its siblings."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from workbench.data import Dataset, LoaderConfig, load_dataset, split_dataset
from workbench.train import OptimizerConfig, TrainConfig, Trainer
from workbench.train.control import TrainControl
from workbench.train.run_dir import RunDir


def _launch(**options):
    from workbench.parallel import Launch

    return Launch(lambda strategy: None, 2, verbose=False, **options)


def _widget(name, **options):
    import workbench.widgets as widgets

    return getattr(widgets, name)(**options)


def _cluster(**options):
    from workbench.estimate import Cluster

    return Cluster(**options)


def _trainer(**options):
    data = split_dataset(load_dataset("regression", n_samples=64), (0.5, 0.5, 0.0), seed=0)
    arguments = {"model": torch.nn.Linear(10, 1), "loss_fn": torch.nn.functional.mse_loss, "splits": data}
    return Trainer(**{**arguments, **options})


API = [
    # TrainConfig
    (lambda: TrainConfig(seed=2**70), ValueError, r"seed must be an integer in 0\.\.4,294,967,295"),
    (lambda: TrainConfig(seed=-1), ValueError, r"seed must be an integer in 0\.\."),
    (lambda: TrainConfig(seed=1.5), ValueError, r"seed must be an integer"),
    (
        lambda: TrainConfig(batch_size=10**30),
        ValueError,
        r"batch_size must be an integer in 1\.\.2,147,483,647",
    ),
    (lambda: TrainConfig(batch_size=0), ValueError, r"batch_size must be an integer"),
    (lambda: TrainConfig(batch_size=True), ValueError, r"batch_size must be an integer"),
    (lambda: TrainConfig(epochs=0), ValueError, r"epochs must be an integer ≥ 1"),
    (lambda: TrainConfig(epochs="3"), ValueError, r"epochs must be an integer ≥ 1, got '3'"),
    (lambda: TrainConfig(accumulate=0), ValueError, r"accumulate must be an integer ≥ 1"),
    (lambda: TrainConfig(log_every=0), ValueError, r"log_every must be an integer ≥ 1"),
    (lambda: TrainConfig(checkpoint_every=-2), ValueError, r"checkpoint_every must be an integer ≥ 1"),
    (lambda: TrainConfig(clip_norm=-1.0), ValueError, r"clip_norm must be a finite number ≥ 0"),
    (lambda: TrainConfig(clip_norm=float("nan")), ValueError, r"clip_norm must be a finite number"),
    (lambda: TrainConfig(clip_value=float("inf")), ValueError, r"clip_value must be a finite number"),
    (lambda: TrainConfig(precision="fp8"), ValueError, r"precision='fp8' is not supported; allowed values"),
    (lambda: TrainConfig(device="tpu"), ValueError, r"device='tpu' is not supported"),
    (lambda: TrainConfig(optimizer="adam"), ValueError, r"optimizer must be an OptimizerConfig"),
    (lambda: TrainConfig(loader={"num_workers": 2}), ValueError, r"loader must be a LoaderConfig"),
    # OptimizerConfig
    (lambda: OptimizerConfig(lr=1e300), ValueError, r"lr must be a finite number > 0 and ≤ 1000"),
    (lambda: OptimizerConfig(lr=0), ValueError, r"lr must be a finite number > 0"),
    (lambda: OptimizerConfig(lr=float("nan")), ValueError, r"lr must be a finite number"),
    (lambda: OptimizerConfig(name="lion"), ValueError, r"name='lion' is not supported; allowed values"),
    (
        lambda: OptimizerConfig("sgd", momentum=1.0),
        ValueError,
        r"momentum must be a finite number ≥ 0 and < 1",
    ),
    (lambda: OptimizerConfig("adam", momentum=0.9), ValueError, r"momentum applies to name='sgd' only"),
    (
        lambda: OptimizerConfig("sgd", nesterov=True),
        ValueError,
        r"nesterov=True needs name='sgd' and momentum",
    ),
    (lambda: OptimizerConfig(weight_decay=-0.1), ValueError, r"weight_decay must be a finite number ≥ 0"),
    (lambda: OptimizerConfig(betas=(0.9,)), ValueError, r"betas must be a pair"),
    (
        lambda: OptimizerConfig(betas=(0.9, 1.0)),
        ValueError,
        r"betas\[1\] must be a finite number ≥ 0 and < 1",
    ),
    (lambda: OptimizerConfig(schedule="step"), ValueError, r"schedule='step' is not supported"),
    (lambda: OptimizerConfig(warmup_steps=-1), ValueError, r"warmup_steps must be an integer ≥ 0"),
    # LoaderConfig
    (lambda: LoaderConfig(num_workers=-1), ValueError, r"num_workers"),
    (lambda: LoaderConfig(prefetch_factor=0), ValueError, r"prefetch_factor"),
    # data
    (lambda: split_dataset(load_dataset("digits"), seed=-1), ValueError, r"seed must be an integer ≥ 0"),
    (lambda: split_dataset(load_dataset("digits"), (0.9, 0.9, 0.0)), ValueError, r"fractions"),
    (lambda: load_dataset("imagenet"), ValueError, r"imagenet"),
    (lambda: Dataset("d", torch.zeros(3, 2), torch.zeros(4, 1), "regression"), ValueError, r"3|4"),
    # run names
    (lambda: RunDir.named("a\x00b"), ValueError, r"run must be a name of printable characters"),
    (lambda: RunDir.named("x" * 300), ValueError, r"at most 200 bytes .* \(300 bytes\)"),
    (lambda: RunDir.named("a/b"), ValueError, r"run must be a non-empty name without '/'"),
    (lambda: RunDir.named(".."), ValueError, r"run must be a non-empty name without '/'"),
    (lambda: RunDir.named(""), ValueError, r"run must be a non-empty name"),
    # Trainer
    (lambda: _trainer(model=lambda x: x), TypeError, r"model must be a torch\.nn\.Module"),
    (lambda: _trainer(config={"epochs": 2}), TypeError, r"config"),
    (lambda: _trainer(loss_fn="mse"), (TypeError, ValueError), r"loss_fn"),
    (lambda: _trainer(callbacks=print), TypeError, r"callbacks"),
    (lambda: _trainer(splits=torch.zeros(4, 3)), (TypeError, ValueError), r"data|splits"),
    # a live change (the Dashboard's lr field) is capped as the config is
    (lambda: TrainControl().set_lr(1e6), ValueError, r"lr must be .* and ≤ 1000, got 1000000\.0"),
    # launch
    (lambda: _launch(timeout_s=1e300), ValueError, r"timeout_s must be at most 604,800 s"),
    (lambda: _launch(timeout_s=0), ValueError, r"timeout_s must be a finite number > 0"),
    (lambda: _launch(addr="not a host"), ValueError, r"addr='not a host' does not resolve"),
    (lambda: _launch(addr=""), ValueError, r"addr must be a host name or IP address"),
    (lambda: _launch(args=5), ValueError, r"args must be a tuple or list .* write args=\(5,\)"),
    (lambda: _launch(args="abc"), ValueError, r"args must be a tuple or list"),
    (
        lambda: __import__("workbench.parallel").parallel.Launch(lambda: 1, 2),
        ValueError,
        r"every rank calls fn\(strategy, \*args\) with 0 argument\(s\) in args, but <lambda>\(\) does not "
        r"take that \(too many positional arguments\); write fn to take the strategy first, lambda "
        r"strategy: \.\.\.$",
    ),
    (
        lambda: _launch(args=(1, 2)),
        ValueError,
        r"with 2 argument\(s\) in args, but <lambda>\(strategy\) does",
    ),
    (
        lambda: __import__("workbench.parallel").parallel.Launch(lambda strategy, epochs: 1, 2),
        ValueError,
        r"\(missing a required argument: 'epochs'\); give the arguments after the strategy as "
        r"args=\(\.\.\.\)$",
    ),
    (lambda: _launch(port=70000), ValueError, r"port must be ≤ 65535"),
    (lambda: _launch(port=0), ValueError, r"port must be an integer ≥ 1"),
    (lambda: _launch(backend="mpi"), ValueError, r"backend='mpi' is not supported"),
    (lambda: _launch(threads_per_process=0), ValueError, r"threads_per_process must be an integer ≥ 1"),
    (lambda: _launch(start_method="thread"), ValueError, r"start_method='thread' is not supported"),
    (lambda: _launch(strategy="ddp"), ValueError, r"strategy must be a distributed strategy"),
    (lambda: __import__("workbench.parallel").parallel.launch(print, 10**6), ValueError, r"would thrash"),
    (lambda: _trainer(run="x", runs_dir="/proc/nope").fit(), OSError, r"cannot write the run directory"),
    # widgets
    (lambda: _widget("MemoryPlot", height=-5), ValueError, r"height must be an integer ≥ 50, got -5"),
    (lambda: _widget("LossPlot", height=10), ValueError, r"height must be an integer ≥ 50"),
    (lambda: _widget("LossPlot", smoothing=1.0), ValueError, r"smoothing must be in \[0, 1\)"),
    (lambda: _widget("LossPlot", max_points=1), ValueError, r"max_points must be an integer ≥ 2"),
    (lambda: _widget("DeviceMonitor", window_s=0), ValueError, r"window_s must be a finite number > 0"),
    (lambda: _widget("DeviceMonitor", height=3), ValueError, r"height must be an integer ≥ 50"),
    (lambda: _widget("MetricPlot", height=0), ValueError, r"height must be an integer ≥ 50"),
    (lambda: _widget("ConsoleProgress", mininterval=-1), ValueError, r"mininterval must be a number ≥ 0"),
    (lambda: _widget("Dashboard", trainer="digits"), TypeError, r"Dashboard drives a training job"),
    (
        lambda: _widget("LossPlot").log(1, loss="abc"),
        ValueError,
        r"LossPlot.log: loss must be a number .*'abc'",
    ),
    (lambda: _widget("LossPlot").log(1, val_f1=[1, 2]), ValueError, r"val_f1 must be a number .*\[1, 2\]"),
    # an argument a config lacks: what it is called here (Python said "unexpected keyword argument")
    (lambda: _cluster(gpus=8), TypeError, r"Cluster\(\) takes no argument gpus; write devices=8"),
    (
        lambda: LoaderConfig(workers=2),
        TypeError,
        r"LoaderConfig\(\) takes no argument workers; write num_workers=2",
    ),
]


@pytest.mark.parametrize(("call", "error", "words"), API, ids=[f"api-{i}" for i in range(len(API))])
def test_bad_arguments_raise_naming_the_field_and_the_rule(call, error, words):
    with pytest.raises(error, match=words):
        call()


CLI = [
    (["train", "digits-mlp", "--lr", "1e300"], r"lr must be a finite number > 0 and ≤ 1000"),
    (["train", "digits-mlp", "--seed", "-1"], r"seed must be an integer in 0\.\."),
    (["train", "digits-mlp", "--batch-size", "0"], r"batch_size must be an integer"),
    (["train", "digits-mlp", "--epochs", "0"], r"epochs must be an integer ≥ 1"),
    (["train", "digits-mlp", "--run", "a/b"], r"run must be a non-empty name without '/'"),
    (["train", "digits-mlp", "--run", "x" * 300], r"at most 200 bytes"),
    (
        ["train", "digits-mlp", "--strategy", "ddp", "--nnodes", "2", "--master-addr", "x;touch PWNED;#"],
        r"--master-addr must be a host name or IP address",
    ),
    (
        [
            "train",
            "digits-mlp",
            "--strategy",
            "ddp",
            "--nnodes",
            "2",
            "--master-addr",
            "n0",
            "--master-port",
            "70000",
        ],
        r"--master-port must be a TCP port in 1\.\.65535, got 70000",
    ),
    (
        [
            "train",
            "digits-mlp",
            "--strategy",
            "ddp",
            "--nnodes",
            "2",
            "--master-addr",
            "n0",
            "--master-port",
            "-1",
        ],
        r"--master-port must be a TCP port in 1\.\.65535, got -1",
    ),
    (["train", "digits-mlp", "--strategy", "ddp", "--nproc-per-node", "0"], r"--nproc-per-node must be ≥ 1"),
    (["kernel", "install", "--prefix", "/proc/nope"], r"cannot write the kernelspec under /proc/nope"),
    (["train", "digits-mlp", "--run", "x", "--runs-dir", "/proc/nope"], r"cannot write the run directory"),
    (
        [
            "train",
            "digits-mlp",
            "--strategy",
            "ddp",
            "--nnodes",
            "2",
            "--master-addr",
            "n0",
            "--join-timeout",
            "0",
        ],
        r"--join-timeout",
    ),
    (
        ["train", "digits-mlp", "--strategy", "ddp", "--collective-timeout", "0"],
        r"--collective-timeout must be 1\.\.86400 seconds, got 0",
    ),
    (
        ["train", "digits-mlp", "--strategy", "ddp", "--nnodes", "2"],
        r"--nnodes 2 needs --master-addr: the host name or IP address of the first machine",
    ),
    # options of several ranks under the single strategy trained one process without a word
    (
        ["train", "digits-mlp", "--global-batch-size", "64"],
        r"--global-batch-size acts on several ranks, and ",
    ),
    (
        ["train", "digits-mlp", "--spark-master", "local[2]"],
        r"--spark-master acts on several ranks.*--strategy ddp",
    ),
    (
        ["train", "digits-mlp", "--nnodes", "2", "--master-addr", "n0"],
        r"--nnodes, --master-addr act on several",
    ),
    (["train", "digits-mlp", "--print-command"], r"--print-command acts on several ranks"),
    # it told a command-line user to "train with run= (and runs_dir=)", the Trainer's keywords
    (["runs"], r"no runs directory at runs; train with `workbench train PRESET --run NAME` first"),
    # it made the data for 10,000 ranks first, and died of it with a traceback
    (
        ["bench", "ddp", "--nprocs", "10000"],
        r"nprocs=10000 processes on \d+ CPU cores would thrash this machine",
    ),
]


def _run_cli(argv, folder):
    """``python -m workbench ARGV`` in `folder`, a fresh process, as a user types it."""
    extra = ["--runs-dir", str(folder)] if argv[0] == "train" and "--runs-dir" not in argv else []
    command = [sys.executable, "-m", "workbench", *argv, *extra]
    return subprocess.run(command, capture_output=True, text=True, cwd=folder)


@pytest.fixture(scope="module")
def cli_runs(request, tmp_path_factory):
    """The selected command lines, each in a real process of its own in a folder of its own, started two
    at a time (each spends ~2 s importing torch; one core apiece): {case index: (folder, completed)}."""
    from concurrent.futures import ThreadPoolExecutor

    selected = [
        item.callspec.params["case"]
        for item in request.session.items
        if getattr(item, "module", None) is request.module
        and "case" in getattr(getattr(item, "callspec", None), "params", {})
    ]
    folders = {index: tmp_path_factory.mktemp(f"cli-{index}") for index in selected}
    with ThreadPoolExecutor(2) as pool:
        done = pool.map(lambda index: _run_cli(CLI[index][0], folders[index]), selected)
        return {index: (folders[index], completed) for index, completed in zip(selected, done, strict=True)}


@pytest.mark.parametrize("case", range(len(CLI)), ids=[f"cli-{i}" for i in range(len(CLI))])
def test_bad_command_lines_exit_2_with_one_clear_line_and_no_traceback(case, cli_runs):
    folder, done = cli_runs[case]
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert __import__("re").search(CLI[case][1], done.stderr), done.stderr
    assert not (folder / "PWNED").exists()


def test_there_are_at_least_sixty_cases():
    assert len(API) + len(CLI) >= 60
