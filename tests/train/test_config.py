import pytest

from workbench.data import LoaderConfig
from workbench.train import OptimizerConfig, TrainConfig


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"epochs": 0}, "epochs"),
        ({"batch_size": 0}, "batch_size"),
        ({"precision": "fp8"}, "precision"),
        ({"clip_norm": -1.0}, "clip_norm"),
        ({"clip_value": float("nan")}, "clip_value"),
        ({"accumulate": 0}, "accumulate"),
        ({"seed": -1}, "seed"),
        ({"log_every": 0}, "log_every"),
        ({"checkpoint_every": 0}, "checkpoint_every"),
        ({"device": "tpu"}, "device"),
        ({"optimizer": "adam"}, "optimizer"),
    ],
)
def test_bad_train_config_names_the_field(changes, field):
    with pytest.raises(ValueError, match=field):
        TrainConfig(**changes)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"name": "lion"}, "name"),
        ({"lr": 0}, "lr"),
        ({"lr": -0.1}, "lr"),
        ({"lr": float("inf")}, "lr"),
        ({"lr": "0.1"}, "lr"),
        ({"name": "sgd", "momentum": 1.0}, "momentum"),
        ({"name": "adam", "momentum": 0.9}, "momentum"),
        ({"name": "sgd", "nesterov": True}, "nesterov"),
        ({"nesterov": "yes"}, "nesterov"),
        ({"weight_decay": -1e-4}, "weight_decay"),
        ({"betas": (0.9,)}, "betas"),
        ({"betas": (0.9, 1.0)}, r"betas\[1\]"),
        ({"schedule": "cyclic"}, "schedule"),
        ({"warmup_steps": -1}, "warmup_steps"),
    ],
)
def test_bad_optimizer_config_names_the_field(changes, field):
    with pytest.raises(ValueError, match=field):
        OptimizerConfig(**changes)


def test_unknown_optimizer_lists_the_allowed_ones():
    with pytest.raises(ValueError, match="'sgd', 'adam', 'adamw'"):
        OptimizerConfig("lion")


@pytest.mark.parametrize(
    ("build", "said"),
    [
        (lambda: TrainConfig(lr=0.1), "TrainConfig() takes no argument lr: lr is in OptimizerConfig; "
         "write optimizer=OptimizerConfig(lr=0.1)"),
        (lambda: TrainConfig(learning_rate=0.1), "learning_rate is OptimizerConfig's lr; "
         "write optimizer=OptimizerConfig(lr=0.1)"),
        (lambda: TrainConfig(num_workers=4), "write loader=LoaderConfig(num_workers=4)"),
        (lambda: TrainConfig(grad_accumulation=3), "grad_accumulation; did you mean accumulate=?; it takes "
         "epochs, batch_size,"),
        (lambda: TrainConfig(max_epochs=3), "TrainConfig() takes no argument max_epochs; write epochs=3"),
        (lambda: TrainConfig().replace(epoch=3), "epoch; did you mean epochs=?"),
        (lambda: TrainConfig().replace(optimizer={"lrr": 1.0}), "OptimizerConfig() takes no argument lrr; "
         "did you mean lr=?"),
        (lambda: OptimizerConfig("sgd", epochs=3), "epochs is in TrainConfig; write TrainConfig(epochs=3, "),
        (lambda: LoaderConfig(workers=4), "LoaderConfig() takes no argument workers; write num_workers=4"),
    ],
)  # fmt: skip
def test_an_argument_the_config_lacks_is_said_with_where_it_lives_or_what_was_meant(build, said):
    """Python's own "got an unexpected keyword argument 'lr'" left the user to find OptimizerConfig."""
    with pytest.raises(TypeError) as refused:
        build()
    assert said in str(refused.value)


def test_config_round_trips_through_a_dict():
    config = TrainConfig(epochs=3, optimizer=OptimizerConfig("adamw", lr=3e-4, betas=(0.8, 0.99)), seed=4)
    assert TrainConfig.from_dict(config.to_dict()) == config


def test_replace_changes_optimizer_fields_from_a_dict():
    config = TrainConfig().replace(epochs=2, optimizer={"lr": 0.5})
    assert config.epochs == 2 and config.optimizer.lr == 0.5 and config.optimizer.name == "adam"


@pytest.mark.parametrize(
    ("given", "meant"), [("bf16-mixed", "bf16"), ("16-mixed", "fp16"), (16, "fp16"), ("no", "fp32")]
)
def test_lightnings_and_accelerates_precision_names_say_ours(given, meant):
    with pytest.raises(ValueError, match=f"; for {given!r} write precision={meant!r}$"):
        TrainConfig(precision=given)
    assert TrainConfig(precision=meant).precision == meant  # what the message says to write is taken
