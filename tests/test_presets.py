import math

import pytest
import torch
from torch import nn

from workbench import models
from workbench.data import Splits
from workbench.presets import PRESETS, build_experiment
from workbench.train import Trainer


def test_changes_reach_config_optimizer_and_data():
    e = build_experiment("regression-linear", n_samples=500, epochs=2, lr=0.2, clip_norm=1.0)
    assert e.config.epochs == 2 and e.config.clip_norm == 1.0
    assert e.config.optimizer.lr == 0.2 and e.config.optimizer.momentum == 0.9  # the preset's momentum stays
    assert len(e.splits.train) + len(e.splits.val) + len(e.splits.test) == 500


def test_another_optimizer_drops_the_presets_sgd_settings():
    e = build_experiment("regression-linear", n_samples=500, optimizer="adam", lr=0.01)
    assert e.config.optimizer.name == "adam" and e.config.optimizer.momentum == 0.0


def test_same_changes_give_the_same_model():
    a, b = (build_experiment("digits-mlp", seed=3).model for _ in range(2))
    assert all((p == q).all() for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_unknown_preset_and_bad_option():
    with pytest.raises(ValueError, match="preset='nope' is not known"):
        build_experiment("nope")
    with pytest.raises(ValueError, match="n_samples"):
        build_experiment("regression-linear", n_samples=-3)
    with pytest.raises(ValueError, match="digits"):
        build_experiment("digits-mlp", image_size=8)  # digits takes no options


def test_a_misspelt_change_is_named_with_the_field_it_resembles_not_passed_to_the_dataset():
    with pytest.raises(ValueError) as refused:
        build_experiment("text-transformer", epoch=3, n_sample=100)
    said = str(refused.value)
    assert said.startswith(
        "build_experiment('text-transformer') takes no change epoch, n_sample; did you mean"
    )
    assert (
        "epochs=?" in said
        and "(n_samples, context, seed)" in said
        and "OptimizerConfig fields (betas, lr" in said
    )


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_builds_a_model_that_fits_its_data(name):
    e = build_experiment(name, n_samples=64) if name != "digits-mlp" else build_experiment(name)
    x, _ = e.splits.train.features[:4], e.splits.train.targets[:4]
    assert e.model(x).shape[0] == 4


def test_images_cnn_head_is_images_cnn_with_an_mlp_head():
    plain, headed = (build_experiment(name, n_samples=64) for name in ("images-cnn", "images-cnn-head"))
    assert plain.config == headed.config and len(headed.model) == len(plain.model) + 2
    assert [type(m) for m in headed.model][-3:] == [nn.Linear, nn.ReLU, nn.Linear]
    assert headed.model[-3].out_features == 64


def test_text_transformer_learns_the_next_character_in_one_epoch():
    e = build_experiment("text-transformer", n_samples=384, epochs=1)
    assert e.loss_fn is models.next_token_loss and e.config.optimizer.name == "adamw"
    vocab_size = e.splits.train.num_classes
    assert e.model.head.out_features == vocab_size and e.splits.train.features.shape[1:] == (32,)

    def held_out_loss():
        e.model.eval()
        with torch.no_grad():
            return float(e.loss_fn(e.model(e.splits.test.features), e.splits.test.targets))

    before = held_out_loss()
    # the loss on held-out text, measured here: the trainer only trains (no val/test evaluation)
    empty = e.splits.val.subset(torch.arange(0))
    result = Trainer(e.model, e.loss_fn, Splits(e.splits.train, empty, empty), e.config).fit()
    assert result.status == "finished" and result.step == 10  # 308 windows in batches of 32
    after = held_out_loss()
    assert before > 0.95 * math.log(vocab_size) and after < 0.8 * math.log(vocab_size)
