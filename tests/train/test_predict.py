"""`trainer.predict(data)`: the model's outputs on a split, a tensor, a Dataset or a DataLoader, in the data's
order, on the CPU, as the model gives them in evaluation (eval mode, no gradients, the fit's precision).
Before, ``trainer.predict`` named what to write by hand (model.eval(), torch.no_grad(), a loop, a cat)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from workbench.data import load_dataset, split_dataset
from workbench.train import TrainConfig, Trainer

X = torch.randn(100, 6, generator=torch.Generator().manual_seed(0))
Y = (X[:, 0] > 0).long()
CONFIG = TrainConfig(epochs=1, batch_size=16)


SPLITS = (TensorDataset(X, Y), TensorDataset(X[:30], Y[:30]))


class Rows(torch.utils.data.Dataset):
    """Samples as dicts, as a Hugging Face dataset gives them."""

    def __len__(self) -> int:
        return len(X)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"x": X[index], "labels": Y[index]}


def _trained(splits=SPLITS, **options) -> Trainer:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Dropout(0.5), nn.Linear(8, 2))
    trainer = Trainer(model, F.cross_entropy, splits, CONFIG, progress=False, **options)
    trainer.fit()
    return trainer


def test_predictions_are_the_eval_mode_outputs_in_the_datas_order_whatever_the_data_is_given_as():
    trainer = _trained()
    model = trainer.model.eval()
    with torch.no_grad():
        expected = model(X)
    for data in (X, TensorDataset(X, Y), TensorDataset(X), DataLoader(TensorDataset(X, Y), batch_size=7)):
        got = trainer.predict(data)
        assert got.shape == (100, 2) and got.device.type == "cpu"
        torch.testing.assert_close(got, expected)  # dropout off: the same outputs every time
    torch.testing.assert_close(trainer.predict("val"), expected[:30])
    assert torch.is_grad_enabled()


def test_a_workbench_split_is_predicted_whole_and_in_order():
    splits = split_dataset(load_dataset("digits"), (0.8, 0.1, 0.1), seed=0)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    trainer = Trainer(model, F.cross_entropy, splits, CONFIG, progress=False)
    trainer.fit()
    classes = trainer.predict("test").argmax(dim=1)
    assert classes.shape == splits.test.targets.shape
    accuracy = (classes == splits.test.targets).float().mean().item()
    assert accuracy == pytest.approx(trainer.evaluate("test")["accuracy"])


def test_a_model_that_computes_its_own_loss_gives_its_logits():
    class OwnLoss(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(6, 2)

        def forward(self, x, labels=None):
            logits = self.net(x)
            loss = None if labels is None else F.cross_entropy(logits, labels)
            return {"loss": loss, "logits": logits}

    trainer = Trainer(OwnLoss(), None, Rows(), CONFIG, progress=False)
    trainer.fit()
    got = trainer.predict(Rows())
    with torch.no_grad():
        torch.testing.assert_close(got, trainer.model.net(X))


@pytest.mark.parametrize(
    "data, error, message",
    [
        ("test", ValueError, "the trainer's data has no test split; give the data to predict on instead"),
        ("valid", ValueError, "data='valid' is not a split; give 'train', 'val' or 'test'"),
        (DataLoader(TensorDataset(X, Y), shuffle=True), ValueError, "the DataLoader shuffles"),
        ([1, 2, 3], TypeError, "data must be a split's name, a tensor of inputs, a Dataset or a DataLoader"),
        (X[:0], ValueError, "the data to predict on has no samples"),
    ],
)
def test_what_predict_cannot_take_is_named(data, error, message):
    trainer = _trained()
    with pytest.raises(error, match=message):
        trainer.predict(data)
