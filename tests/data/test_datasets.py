import numpy as np
import pytest
import torch

from workbench.data import DATASETS, Dataset, load_dataset


def test_registry_names():
    assert set(DATASETS) == {"digits", "regression", "synthetic_images", "text"}


def test_digits_is_sklearns_bundled_set_scaled_to_unit_range():
    data = load_dataset("digits")
    assert data.features.shape == (1797, 1, 8, 8) and data.features.dtype == torch.float32
    assert data.targets.shape == (1797,) and data.targets.dtype == torch.int64
    assert float(data.features.min()) == 0.0 and float(data.features.max()) == 1.0
    assert sorted(data.targets.unique().tolist()) == list(range(10)) and data.num_classes == 10
    assert repr(data) == "Dataset('digits', 1797 samples, features (1, 8, 8) float32, 10 classes)"


def test_digits_read_from_sklearns_file_equal_load_digits_without_importing_sklearn(monkeypatch):
    import subprocess
    import sys

    from sklearn.datasets import load_digits

    from workbench.data import datasets

    raw, data = load_digits(), load_dataset("digits")
    assert torch.equal(data.features, torch.from_numpy(raw.images.astype("float32") / 16.0).unsqueeze(1))
    assert torch.equal(data.targets, torch.from_numpy(raw.target.astype("int64")))
    imported = "import sys, workbench.data as d; d.load_dataset('digits'); print('sklearn' in sys.modules)"
    assert (
        subprocess.run([sys.executable, "-c", imported], capture_output=True, text=True).stdout == "False\n"
    )
    monkeypatch.setattr(datasets.importlib.util, "find_spec", lambda name: None)  # a layout we do not know
    assert torch.equal(load_dataset("digits").features, data.features)  # scikit-learn's loader, then


def test_regression_default_is_one_million_by_ten():
    data = load_dataset("regression")
    assert data.features.shape == (1_000_000, 10) and data.targets.shape == (1_000_000, 1)
    assert data.task == "regression" and data.features.dtype == data.targets.dtype == torch.float32


def test_regression_noise_is_the_floor_of_the_mse():
    data = load_dataset("regression", n_samples=200_000, n_features=4, noise=0.1, seed=3)
    coef = torch.tensor(data.info["coef"])
    residual = data.targets[:, 0] - data.features @ coef - data.info["bias"]
    assert float(residual.pow(2).mean()) == pytest.approx(0.01, rel=0.02)


@pytest.mark.parametrize("name", ["regression", "synthetic_images", "text"])
def test_generated_sets_are_deterministic_by_seed(name):
    a, b = (load_dataset(name, n_samples=500, seed=7) for _ in range(2))
    c = load_dataset(name, n_samples=500, seed=8)
    assert torch.equal(a.features, b.features) and torch.equal(a.targets, b.targets)
    assert not torch.equal(a.features, c.features)


def test_synthetic_images_shape_and_classes_are_learnable():
    data = load_dataset("synthetic_images", n_samples=2000, image_size=12, channels=2, num_classes=5)
    assert data.features.shape == (2000, 2, 12, 12) and data.num_classes == 5
    # nearest class mean, fitted on one half, classifies the other half: the classes carry signal
    x, y = data.features.flatten(1), data.targets
    means = torch.stack([x[:1000][y[:1000] == k].mean(0) for k in range(5)])
    predicted = torch.cdist(x[1000:], means).argmin(1)
    assert float((predicted == y[1000:]).float().mean()) > 0.9


def test_unknown_name_names_the_field_and_the_choices():
    with pytest.raises(ValueError, match=r"name='mnist'.*'digits', 'regression', 'synthetic_images', 'text'"):
        load_dataset("mnist")


def test_unknown_option_names_the_allowed_options():
    with pytest.raises(ValueError, match=r"no option n_samples; allowed options: none"):
        load_dataset("digits", n_samples=10)
    with pytest.raises(ValueError, match=r"no option size; allowed options: n_samples, n_features"):
        load_dataset("regression", size=10)


@pytest.mark.parametrize(
    ("name", "options", "field"),
    [
        ("regression", {"n_samples": 0}, "n_samples"),
        ("regression", {"n_features": 2.5}, "n_features"),
        ("regression", {"noise": -1}, "noise"),
        ("synthetic_images", {"image_size": 2}, "image_size"),
        ("synthetic_images", {"num_classes": 1}, "num_classes"),
        ("synthetic_images", {"noise": "loud"}, "noise"),
        ("text", {"n_samples": 0}, "n_samples"),
        ("text", {"context": 1}, "context"),
    ],
)
def test_bad_sizes_name_the_field(name, options, field):
    with pytest.raises(ValueError, match=field):
        load_dataset(name, **options)


def test_dataset_rejects_mismatched_lengths_and_unknown_task():
    with pytest.raises(ValueError, match="differ in length"):
        Dataset("x", torch.zeros(3, 2), torch.zeros(2), "regression")
    with pytest.raises(ValueError, match=r"task='ranking'.*'classification', 'regression'"):
        Dataset("x", torch.zeros(3, 2), torch.zeros(3), "ranking")


def test_unknown_text_option_names_the_allowed_options():
    with pytest.raises(ValueError, match=r"no option block_size; allowed options: n_samples, context, seed"):
        load_dataset("text", block_size=8)


def test_subset_keeps_per_token_targets():
    data = load_dataset("text", n_samples=10, context=4)
    part = data.subset(torch.tensor([3, 7]))
    assert part.targets.shape == (2, 4) and torch.equal(part.targets[1], data.targets[7])
    assert part.num_classes == data.num_classes and part.info["vocab"] == data.info["vocab"]


def test_subset_keeps_the_metadata():
    data = load_dataset("digits")
    part = data.subset(torch.tensor([5, 1]))
    assert len(part) == 2 and part.num_classes == 10
    assert np.array_equal(part.features[0].numpy(), data.features[5].numpy())
