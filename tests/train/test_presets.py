import pytest

from workbench.train import PRESETS, build_experiment


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


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_builds_a_model_that_fits_its_data(name):
    e = build_experiment(name, n_samples=64) if name != "digits-mlp" else build_experiment(name)
    x, _ = e.splits.train.features[:4], e.splits.train.targets[:4]
    assert e.model(x).shape[0] == 4
