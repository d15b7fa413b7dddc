"""Check functions for the tutorials' "build it yourself" exercises: a learner's code against a reference.

Each ``check_*`` runs the learner's function and the reference (torch, or the workbench's own code) on the
same seeded inputs, returns a short line saying what matched, and raises :class:`ExerciseMismatch` naming the
first place they differ (which setting, which step, by how much) and a hint. Given a stub (a function that
still calls `your_turn`), a check says "not attempted yet" instead (`workbench.exercises.waiting`).
"""

from workbench.exercises.averaging import check_weight_average
from workbench.exercises.grad_scaler import check_scale_update, simulate_loss_scaling
from workbench.exercises.kernels import (
    check_axis_sum,
    check_block_sum,
    check_conv1d,
    check_dot,
    check_map,
    check_outer_add,
    check_pool,
    check_prefix_sum,
    check_tiled_matmul,
    check_zip,
)
from workbench.exercises.launchers import check_launcher_place, launcher_cases
from workbench.exercises.metric_sums import check_recall_metric
from workbench.exercises.mismatch import ExerciseMismatch
from workbench.exercises.occupancy import check_blocks_per_sm
from workbench.exercises.optimizers import (
    OPTIMIZER_CHECKS,
    check_optimizer_step,
    follow_trajectory,
    quadratic,
    steps_to_reach,
    trajectory_figure,
)
from workbench.exercises.schedules import check_lr_schedule
from workbench.exercises.tensor_parallel import check_tensor_parallel_mlp, split_mlp
from workbench.exercises.waiting import your_turn

__all__ = [
    "OPTIMIZER_CHECKS",
    "ExerciseMismatch",
    "check_axis_sum",
    "check_block_sum",
    "check_blocks_per_sm",
    "check_conv1d",
    "check_dot",
    "check_launcher_place",
    "check_lr_schedule",
    "check_map",
    "check_optimizer_step",
    "check_outer_add",
    "check_pool",
    "check_prefix_sum",
    "check_recall_metric",
    "check_scale_update",
    "check_tensor_parallel_mlp",
    "check_tiled_matmul",
    "check_weight_average",
    "check_zip",
    "follow_trajectory",
    "launcher_cases",
    "quadratic",
    "simulate_loss_scaling",
    "split_mlp",
    "steps_to_reach",
    "trajectory_figure",
    "your_turn",
]
