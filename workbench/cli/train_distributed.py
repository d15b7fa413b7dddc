"""``workbench train --strategy NAME`` (any but single): one rank under a launcher, the torchrun command for
several machines, or local processes (launch, or Spark's TorchDistributor)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from workbench.cli.train_local import experiment_from, train_here
from workbench.parallel.launching.torchrun_args import check_endpoint, torchrun_command
from workbench.parallel.strategies.registry import COMPOSED, strategy_spec


def _strategy(args: argparse.Namespace) -> Any:
    """The strategy --strategy names, with its options (not yet bound to a process group)."""
    strategy_class = strategy_spec(args.strategy).load()
    if args.strategy == "pipeline":
        points = None if args.split_points is None else [p for p in args.split_points.split(",") if p]
        return strategy_class(
            split_points=points, schedule=args.pipeline_schedule, microbatches=args.microbatches
        )
    if args.strategy == "ddp+pp":
        points = None if args.split_points is None else [p for p in args.split_points.split(",") if p]
        options = {"schedule": args.pipeline_schedule, "microbatches": args.microbatches}
        return strategy_class(pp=args.pp, split_points=points, **options)
    if args.strategy in COMPOSED:
        return strategy_class(tp=args.tp)
    return strategy_class()


def train_distributed(args: argparse.Namespace) -> int:
    """Under a launcher (torchrun, mpirun, srun): be one rank. Otherwise: print the torchrun command, or
    launch local processes."""
    from workbench.parallel import launch
    from workbench.parallel.group.process_group import (
        join_process_group_from_env,
        lost_peer,
        under_a_launcher,
    )

    strategy = _strategy(args)
    if not 1 <= args.collective_timeout <= 86400:
        raise ValueError(f"--collective-timeout must be 1..86400 seconds, got {args.collective_timeout}")
    if under_a_launcher():  # torchrun, TorchDistributor, mpirun or srun started this process
        timeout = args.collective_timeout
        who = f"--strategy {args.strategy}"
        join_process_group_from_env(args.backend, timeout, who=who, share_cores=args.threads is None)
        strategy.bind()
        _share_global_batch(args, strategy.data_world_size)
        failed = True
        try:
            status = train_here(args, strategy, signalled_ranks=True)
            failed = False
            return status
        except Exception as error:
            lost = lost_peer(error)
            if lost is None:
                raise
            print(
                f"workbench train: error: rank {strategy.rank} lost {lost} (its process stopped, or the "
                f"network between the machines failed, or it did not answer for --collective-timeout "
                f"{timeout:g} s); see that machine's log",
                file=sys.stderr,
            )
            return 1
        finally:
            strategy.close(wait_for_others=not failed)  # after a failure the others may be gone
    for flag in ("nproc_per_node", "nnodes"):
        if getattr(args, flag) < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be ≥ 1, got {getattr(args, flag)}")
    inner = args.pp if args.strategy == "ddp+pp" else args.tp if args.strategy in COMPOSED else 1
    shards = args.nnodes * args.nproc_per_node // inner
    _share_global_batch(args, shards)  # here; under torchrun each rank shares it over the world it finds
    experiment = experiment_from(args)  # checked before anything starts
    strategy.validate(experiment.model, experiment.config, world_size=args.nnodes * args.nproc_per_node)
    if args.nnodes > 1 and args.master_addr is None:
        raise ValueError(
            f"--nnodes {args.nnodes} needs --master-addr: the host name or IP address of the first machine, "
            "which every machine can reach, e.g. --master-addr 10.0.0.1 (to try it in two terminals of this "
            "machine: --master-addr 127.0.0.1)"
        )
    if args.master_addr is None:
        args.master_addr = "127.0.0.1"
    if args.nnodes > 1 or args.print_command:
        check_endpoint(args.master_addr, args.master_port)
        if not 1 <= args.join_timeout <= 86400:
            raise ValueError(f"--join-timeout must be 1..86400 seconds, got {args.join_timeout}")
        print(torchrun_command(args))
        return 0

    def train(strategy: Any) -> int:  # the workers train the experiment built (and checked) here
        return train_here(args, strategy, experiment)

    if args.spark_master is not None:
        return _train_on_spark(args, train, strategy)
    from workbench.train.progress import ConsoleProgress

    # a terminal's progress goes to stderr with a line per evaluation (stdout holds the result)
    progress = [ConsoleProgress()]
    return launch(
        train,
        args.nproc_per_node,
        strategy=strategy,
        backend=args.backend,
        progress=False,
        callbacks=progress,
    )


def _share_global_batch(args: argparse.Namespace, ranks: int) -> None:
    """Set ``args.batch_size`` to this rank's share of ``--global-batch-size`` over `ranks` data shards."""
    total = args.global_batch_size
    if total is None:
        return
    if args.strategy not in ("ddp", "fsdp", *COMPOSED):
        raise ValueError(
            f"--global-batch-size is for --strategy ddp, fsdp, fsdp+tp or ddp+tp (each data shard a share of "
            "the batch); "
            f"--strategy {args.strategy} takes --batch-size"
        )
    if args.batch_size is not None:
        raise ValueError(
            f"give --batch-size (per rank) or --global-batch-size (over all ranks), not both: got "
            f"--batch-size {args.batch_size} and --global-batch-size {total}"
        )
    if total < 1 or total % ranks:
        raise ValueError(
            f"--global-batch-size {total} does not split evenly over {ranks} ranks; give a multiple of "
            f"{ranks} (a multiple of every world size the job may run at, e.g. of 2 and 1 for "
            "--nnodes 1:2 with one process each)"
        )
    args.batch_size = total // ranks


def _train_on_spark(args: argparse.Namespace, train: Any, strategy: Any) -> int:
    """The ranks as Spark tasks (or on the driver) of a session on --spark-master."""
    from workbench.parallel.launching.spark import run_on_spark, spark_failure, spark_session

    with spark_session(args.spark_master) as session:
        try:
            return run_on_spark(
                train,
                args.nproc_per_node,
                strategy=strategy,
                local_mode=args.spark_on_driver,
                spark=session,
                backend=args.backend,
                timeout_s=args.collective_timeout,
            )
        except Exception as error:  # a failed task: one line, not Py4J's Java stack
            summary = spark_failure(error)
            if summary is None:
                raise
            print(f"workbench train: error: {summary}", file=sys.stderr)
            return 1
