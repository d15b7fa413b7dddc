"""TrainConfig(profile_steps=...): a torch.profiler trace of the chosen steps in the run directory (JSON with
those steps' ranges and no others), the top operators as a table, and bad step ranges refused."""

from __future__ import annotations

import json

import pytest
import torch

from workbench import models
from workbench.data import load_dataset, split_dataset
from workbench.train import OptimizerConfig, TrainConfig, Trainer


def _trainer(tmp_path, **config):
    splits = split_dataset(load_dataset("regression", n_samples=256), (1.0, 0.0, 0.0), seed=0)
    config = TrainConfig(epochs=2, batch_size=32, optimizer=OptimizerConfig("sgd", lr=0.1), **config)
    return Trainer(models.mlp(10, 1, hidden=(16,)), torch.nn.functional.mse_loss, splits, config,
                   run="profiled", runs_dir=tmp_path)  # fmt: skip


def test_the_chosen_steps_are_traced_into_the_run_directory_with_a_table_of_top_operators(tmp_path):
    trainer = _trainer(tmp_path, profile_steps=(3, 5))
    trainer.fit()
    trace = tmp_path / "profiled" / "profile" / "rank0.json"
    assert trainer.profile is not None and trainer.profile.trace == trace
    events = json.loads(trace.read_text())["traceEvents"]
    steps = sorted({e["name"] for e in events if e.get("name", "").startswith("step ")})
    assert steps == ["step 3", "step 4", "step 5"]
    names = [op.name for op in trainer.profile.top_ops]
    assert "aten::addmm" in names or "aten::mm" in names  # the model's matrix products
    table = (tmp_path / "profiled" / "profile" / "top_ops_rank0.txt").read_text()
    assert table.startswith("operator") and names[0] in table
    assert "top operators" in trainer.profile._repr_html_()


def test_a_fit_stopped_before_the_last_profiled_step_still_writes_its_trace(tmp_path):
    trainer = _trainer(tmp_path, profile_steps=(2, 14), log_every=1)

    class StopAtStep4:
        def on_step(self, metrics):
            if metrics["step"] == 4:
                trainer.control.stop()

    trainer.add_callback(StopAtStep4())
    assert trainer.fit().status == "stopped"
    events = json.loads(trainer.profile.trace.read_text())["traceEvents"]
    assert {e["name"] for e in events if e.get("name", "").startswith("step ")} == {
        "step 2",
        "step 3",
        "step 4",
    }


def test_without_profile_steps_nothing_is_profiled(tmp_path):
    trainer = _trainer(tmp_path)
    trainer.fit()
    assert trainer.profile is None and not (tmp_path / "profiled" / "profile").exists()


@pytest.mark.parametrize("steps", [(0, 3), (5, 2), (1.0, 2), 3, (1, 2, 3)])
def test_bad_step_ranges_are_named_with_an_example(steps):
    with pytest.raises(
        ValueError, match=r"profile_steps must be a pair \(first, last\).*e\.g\. profile_steps=\(5, 7\)"
    ):
        TrainConfig(profile_steps=steps)


def test_steps_past_the_fit_are_refused_with_its_length(tmp_path):
    with pytest.raises(
        ValueError, match=r"profile_steps=\(5, 99\) ends after the fit's last step \(16 = 8 steps"
    ):
        _trainer(tmp_path, profile_steps=(5, 99))


def test_the_pair_survives_the_config_json_round_trip():
    config = TrainConfig(profile_steps=(2, 4))
    assert TrainConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config


def test_a_control_request_profiles_the_next_steps_and_the_step_event_says_where(tmp_path):
    trainer = _trainer(tmp_path, log_every=1)
    profiles = []

    class AskAtStep4:
        def on_step(self, metrics):
            if metrics["step"] == 4:
                trainer.control.profile(3)  # the Dashboard's Profile button
            if metrics["step"] == 5:
                trainer.control.profile(3)  # one under way: ignored
            if "profile" in metrics:
                profiles.append((metrics["step"], metrics["profile"]))

    trainer.add_callback(AskAtStep4())
    trainer.fit()
    trace = tmp_path / "profiled" / "profile" / "rank0.json"
    assert profiles == [(7, {"steps": [5, 7], "trace": str(trace), "top_ops": profiles[0][1]["top_ops"]})]
    assert len(profiles[0][1]["top_ops"]) == 5 and trainer.profile.steps == (5, 7)
    events = json.loads(trace.read_text())["traceEvents"]
    assert {e["name"] for e in events if e.get("name", "").startswith("step ")} == {
        "step 5",
        "step 6",
        "step 7",
    }


def test_bad_profile_requests_are_refused():
    from workbench.train import TrainControl

    with pytest.raises(ValueError, match="steps must be an integer ≥ 1"):
        TrainControl().profile(0)


@pytest.mark.parametrize(
    ("name", "library"),
    [
        ("aten::mm", True),
        ("aten::addmm", True),
        ("aten::bmm", True),
        ("aten::mkldnn_convolution", True),
        ("aten::convolution_backward", True),
        ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", True),
        ("aten::gelu_backward", False),
        ("aten::native_layer_norm", False),
        ("aten::_fused_adamw_", False),
        ("step 3", False),
    ],
)
def test_library_kernels_are_products_convolutions_and_attention(name, library):
    from workbench.train.profiling import LIBRARY_KERNEL

    assert bool(LIBRARY_KERNEL.fullmatch(name)) is library


def test_the_library_share_is_the_products_part_of_the_profiled_time():
    from workbench.train.profiling import StepProfiler

    profiler = StepProfiler((1, 2), torch.device("cpu"), directory=None, rank=0)
    big, small = torch.randn(256, 256), torch.randn(256, 256)
    for step in (1, 2):
        profiler.before_step(step)
        for _ in range(3):
            big @ big
        small.exp()
        profiler.after_step(step)
    result = profiler.result
    mm_ms = sum(op.self_ms for op in result.top_ops if op.name == "aten::mm")
    assert result.library_ms == pytest.approx(mm_ms) and 0 < result.library_share < 1
    assert f"{result.library_share:.0%} of the time in matrix-product" in result.table()


def test_a_profiled_fit_does_not_warn_about_profiler_cycles_on_torch_2_11(tmp_path, profiler_warnings):
    _trainer(tmp_path, profile_steps=(2, 3)).fit()
    assert not [w for w in profiler_warnings if "clears events" in str(w.message)]
