"""Round two of "nothing silent" (issue 44), table-driven: a model, data or argument that does not fit
stops with one sentence naming both sides and the fix, instead of torch's words from deep inside a layer or
a result that is silently wrong. Each case failed before its fix (a raw RuntimeError/IndexError/TypeError
from torch or pathlib, or no error at all)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import IterableDataset, TensorDataset

from workbench.train import Callback, OptimizerConfig, TrainConfig, Trainer
from workbench.train.metrics import F1

X = torch.randn(64, 10, generator=torch.Generator().manual_seed(0))
Y = torch.arange(64) % 10
DATA = TensorDataset(X, Y)
CONFIG = TrainConfig(epochs=1, batch_size=16)


def _fit(model=None, data=DATA, config=CONFIG, **options):
    return Trainer(
        model if model is not None else nn.Linear(10, 10), F.cross_entropy, data, config, **options
    ).fit()


def _train(model, loss_fn, data=DATA, **options):
    return Trainer(model, loss_fn, data, CONFIG, **options).fit()


class _Pair(nn.Linear):  # returns (logits, a scalar), as models with an auxiliary output do
    def forward(self, x):
        return super().forward(x), x.sum()


class _Logits(nn.Linear):  # a dict of outputs, as Hugging Face models return
    def forward(self, x):
        return {"logits": super().forward(x)}


BINARY = TensorDataset(X, Y % 2)


class _Nothing(IterableDataset):
    def __iter__(self):
        return iter(())


def _frozen():
    model = nn.Linear(10, 10)
    model.requires_grad_(False)
    return model


LINEAR_7 = r"first Linear layer takes 7 features per sample, but the inputs have 10 \(inputs \(16, 10\)\)"
CASES = [
    # model ↔ data
    (lambda: _fit(nn.Linear(7, 10)), ValueError, LINEAR_7 + r": make it nn.Linear\(10, \.\.\.\)"),
    (lambda: _fit(nn.Linear(10, 5)), ValueError,
     r"targets hold class 9, but the model outputs 5 class scores per sample \(outputs \(16, 5\)\): give the "
     r"last layer 10 outputs"),
    (lambda: _fit(data=TensorDataset(X, Y - 1)), ValueError,
     r"targets hold class -1: class indices run from 0 to 9"),
    (lambda: _fit(data=(DATA, TensorDataset(X, Y + 3))), ValueError,  # in evaluation too
     r"targets hold class 12, but the model outputs 10 class scores"),
    (lambda: _fit(data=TensorDataset(X, Y[:, None])), ValueError,
     r"targets have shape \(16, 1\), a column of class indices, but the loss takes one index per sample, "
     r"shape \(16,\), for outputs \(16, 10\): y.squeeze\(1\) \(e.g. TensorDataset\(x, y.squeeze\(1\)\)\)"),
    (lambda: _fit(data=TensorDataset(X, Y[:, None].float())), ValueError,
     r"targets of shape \(16, 1\): they broadcast to \(16, 10\).* Make them match \(a column of class "
     r"indices\? cross_entropy takes them as integers, one per sample: y.squeeze\(1\).long\(\)\)"),
    (lambda: _fit(data=TensorDataset(X, F.one_hot(Y, 10))), ValueError,
     r"targets have the outputs' shape \(16, 10\) but are int64: one-hot or multi-label targets must be "
     r"floats \(y.float\(\)\); or give class indices, one per sample \(y.argmax\(1\)\)"),
    (lambda: _fit(data=TensorDataset(X.double(), Y)), ValueError,
     r"inputs are float64 but the model's parameters are float32: convert the data \(x.to\(torch.float32\)"),
    (lambda: _fit(data=TensorDataset(X.long(), Y)), ValueError,
     r"inputs are int64 \(integers\) but the model computes in float32: convert them"),
    (lambda: _fit(nn.Sequential(nn.Conv1d(3, 4, 3), nn.Flatten(), nn.LazyLinear(10)),
                  data=TensorDataset(torch.randn(32, 2, 8), Y[:32])), ValueError,
     r"first Conv1d takes 3 input channels, but the inputs have 2 \(inputs \(16, 2, 8\), channels first"),
    (lambda: _fit(nn.Sequential(nn.Linear(10, 10), nn.BatchNorm1d(10)), data=TensorDataset(X[:17], Y[:17])),
     ValueError, r"BatchNorm layer got a batch of 1 sample while training .* LoaderConfig\(drop_last=True\)"),
    # a loss that does not take what the model returns or the data holds
    (lambda: _train(_Pair(10, 10), F.cross_entropy), ValueError,
     r"the model returned a tuple \(\(16, 10\), \(\)\), and loss_fn\(outputs, target\) got all of it as its "
     r"outputs: pick the tensor .*, loss_fn=lambda outputs, y: your_loss\(outputs\[0\], y\)"),
    (lambda: _train(_Logits(10, 10), F.cross_entropy), ValueError,
     r"the model returned a dict \{'logits': \(16, 10\)\}, .* your_loss\(outputs\['logits'\], y\)"),
    (lambda: _fit(data=TensorDataset(X, Y.int())), ValueError,
     r"the integer targets \(16,\) int32 are class indices, which cross_entropy takes as int64: y.long\(\)"),
    (lambda: _train(nn.Linear(10, 10), F.mse_loss), ValueError,
     r"loss_fn got outputs \(16, 10\) and integer targets \(16,\) int64, one class index per sample as "
     r"cross_entropy takes them, but this loss compares .*: give one-hot float targets \(16, 10\), "
     r"F.one_hot\(y, 10\).float\(\); or use F.cross_entropy"),
    (lambda: _train(nn.Linear(10, 1), F.binary_cross_entropy_with_logits, BINARY), ValueError,
     r"one output per sample \(16, 1\) and integer targets \(16,\) int64; .* y.float\(\).unsqueeze\(1\)"),
    (lambda: _train(nn.Linear(10, 1), nn.MSELoss(), BINARY), ValueError,  # trained on a (16, 16) loss before
     r"one output per sample \(16, 1\) and integer targets \(16,\) int64; .* y.float\(\).unsqueeze\(1\)"),
    (lambda: _train(nn.Linear(10, 1), lambda out, y: F.l1_loss(out, y), TensorDataset(X, Y.float())),
     ValueError, r"outputs of shape \(16, 1\) and targets of shape \(16,\): they broadcast to \(16, 16\)"),
    # a mask (B, H, W) against one score map per image (B, 1, H, W): said "cross_entropy ... y.long()" before
    (lambda: _train(nn.Conv2d(1, 1, 3, padding=1), F.binary_cross_entropy_with_logits,
                    TensorDataset(torch.randn(64, 1, 8, 8), torch.rand(64, 8, 8).round())), ValueError,
     r"outputs of shape \(16, 1, 8, 8\) and targets of shape \(16, 8, 8\): they broadcast to "
     r"\(16, 16, 8, 8\), .* targets as \(16, 1, 8, 8\) \(y.unsqueeze\(1\), .* outputs as \(16, 8, 8\) "
     r"\(model\(x\).squeeze\(1\)\)$"),
    # one score per sample with integer targets: torch's "Expected floating point type for target with class
    # probabilities, got Long" and "result type Float can't be cast to the desired output type Long"
    (lambda: _train(nn.Sequential(nn.Linear(10, 1), nn.Flatten(0)), F.cross_entropy, BINARY), ValueError,
     r"^loss_fn got one score per sample \(16,\) and integer targets \(16,\) int64, but cross_entropy takes "
     r"a score per class, \(16, classes\): .* F.binary_cross_entropy_with_logits and y.float\(\)$"),
    (lambda: _train(nn.Sequential(nn.Linear(10, 1), nn.Flatten(0)), F.binary_cross_entropy_with_logits,
                    BINARY), ValueError,
     r"^loss_fn got outputs \(16,\) and integer targets \(16,\) int64; this loss takes float targets: "
     r"y.float\(\)$"),
    # a sequence model's (B, T, classes) scores: said "the targets hold class 9, but the model outputs 5 ..."
    (lambda: _train(nn.Sequential(nn.Embedding(10, 8), nn.Linear(8, 10)), F.cross_entropy,
                    TensorDataset(Y.view(64, 1).repeat(1, 5), Y.view(64, 1).repeat(1, 5))), ValueError,
     r"^loss_fn got outputs \(16, 5, 10\) with the class scores last and targets \(16, 5\), but "
     r"cross_entropy takes the classes in dimension 1, \(16, 10, 5\): flatten both, .*"
     r"F.cross_entropy\(outputs.flatten\(0, -2\), y.flatten\(\)\)"),
    # metrics with no outputs to compute them from (failed at the first evaluation, an epoch later)
    (lambda: Trainer(nn.Linear(10, 10), None, (DATA, DATA), CONFIG, metrics={"f1": F1(10)},
                     step_fn=lambda model, batch: F.cross_entropy(model(batch[0]), batch[1])).fit(),
     ValueError,
     r"^metrics \['f1'\] are computed from the outputs, and step_fn returned only the loss: return \(loss, "
     r"outputs\) from step_fn$"),
    (lambda: _fit(data=TensorDataset(X, Y, torch.rand(64))), ValueError,  # (inputs, target, weights)
     r"^with loss_fn, a batch of 3, \[\(16, 10\) float32, \(16,\) int64, \(16,\) float32\], is 2 inputs and "
     r"the target: model\(\*batch\[:-1\]\), but Linear.forward\(input.* "
     r"does not take 2 inputs. For a batch of other parts \(sample weights, ...\) give step_fn="),
    # a class where an instance belongs
    (lambda: _train(nn.Linear, F.cross_entropy), TypeError,
     r"^model is the class Linear; build the model first: Linear\(\.\.\.\)$"),
    (lambda: _train(nn.Linear(10, 10), nn.CrossEntropyLoss), TypeError,
     r"^loss_fn is the class CrossEntropyLoss; give an instance, loss_fn=CrossEntropyLoss\(\)"),
    (lambda: _fit(metrics={"f1": F1}, data=(DATA, DATA)), TypeError,
     r"^metrics\['f1'\] is the class F1; give an instance, e.g. F1\(\.\.\.\)$"),
    (lambda: _fit(callbacks=[Callback]), TypeError,
     r"^callbacks\[0\] is the class Callback; give an instance: Callback\(\)$"),
    (lambda: TrainConfig(optimizer="adam"), ValueError,
     r"^optimizer must be an OptimizerConfig, got str 'adam': write optimizer=OptimizerConfig\('adam'\)$"),
    (lambda: TrainConfig(optimizer=torch.optim.Adagrad), ValueError,
     r"got the class Adagrad: OptimizerConfig names one of sgd, adam, adamw .*; for torch.optim.Adagrad, "
     r"give the Trainer optimizer_factory=lambda params, cfg: torch.optim.Adagrad\(params, lr=cfg.lr\)$"),
    (lambda: TrainConfig(optimizer=torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1)), ValueError,
     r"got SGD: torch's SGD is one of the Trainer's own; write optimizer=OptimizerConfig\('sgd', lr=0.1\)$"),
    # the model and its optimizer
    (lambda: _fit(nn.Identity()), ValueError,
     r"the model \(Identity\) has no parameters, so there is nothing to train"),
    (lambda: _fit(_frozen()), ValueError,
     r"every parameter of the model \(2 tensors\) has requires_grad=False"),
    (lambda: _fit(optimizer_factory=torch.optim.SGD), TypeError,
     r"got the class SGD; use optimizer_factory=lambda params, cfg: SGD\(params, lr=cfg.lr\)"),
    (lambda: _fit(optimizer_factory=lambda params: None), TypeError,
     r"called as factory\(params, optimizer_config\), but <lambda>\(params\) does not take those two"),
    (lambda: _fit(optimizer_factory=lambda params, cfg: None), TypeError,
     r"optimizer_factory returned NoneType, not a torch.optim.Optimizer"),
    # fit's arguments and data that yields nothing
    (lambda: Trainer(nn.Linear(10, 10), F.cross_entropy, DATA, CONFIG).fit(resume=1), TypeError,
     r"resume must be True \(this run's checkpoint\), False, or a checkpoint's path; got int 1"),
    (lambda: Trainer(nn.Linear(10, 10), F.cross_entropy, DATA, CONFIG).fit(nn.Linear(10, 10)), TypeError,
     r"^fit\(\) got Linear as resume: the model and the data are the Trainer's, given once to "
     r"Trainer\(model, loss_fn, splits, config\); call trainer.fit\(\)"),  # Lightning's trainer.fit(model)
    (lambda: _fit(data=_Nothing(), config=TrainConfig(optimizer=OptimizerConfig(schedule="constant"))),
     ValueError, r"the training data gave no batch in epoch 1, so nothing was trained"),
    # metrics that do not fit the model (F1 of 2 classes on 10 gave a number before)
    (lambda: _fit(metrics={"f1": F1(num_classes=2)}, data=(DATA, DATA)), ValueError,
     r"F1\(num_classes=2\) got outputs with 10 class scores per sample \(outputs \(16, 10\)\): give "
     r"F1\(num_classes=10\)"),
    (lambda: Trainer(nn.Linear(10, 12), lambda out, y: out.square().mean(), (DATA, TensorDataset(X, Y + 5)),
                     CONFIG, metrics={"f1": F1(num_classes=12)}).fit(), ValueError,
     r"F1\(num_classes=12\) got target class 14, outside 0\.\.11"),
]  # fmt: skip


@pytest.mark.parametrize(("call", "error", "words"), CASES, ids=[f"case-{i}" for i in range(len(CASES))])
def test_a_mismatch_stops_with_one_sentence_naming_both_sides_and_the_fix(call, error, words):
    with pytest.raises(error, match=words) as raised:
        call()
    assert "\n" not in str(raised.value)


def test_the_original_error_stays_attached_and_unrecognised_errors_pass_untouched():
    with pytest.raises(ValueError) as raised:
        _fit(nn.Linear(7, 10))
    assert isinstance(raised.value.__cause__, RuntimeError)  # torch's own words, one `raise ... from` away

    class Broken(nn.Linear):
        def forward(self, x):
            raise RuntimeError("my own bug")

    with pytest.raises(RuntimeError, match=r"^my own bug$"):
        _fit(Broken(10, 10))


def test_a_loss_of_yours_that_reshapes_the_outputs_itself_trains():
    """Outputs (B, 1) against targets (B,) were refused for any loss_fn, also one that squeezes them."""
    data = TensorDataset(X, X[:, 0])
    result = _train(nn.Linear(10, 1), lambda out, y: F.mse_loss(out.squeeze(1), y), data)
    assert result.status == "finished"
    with pytest.raises(ValueError, match=r"they broadcast to \(16, 16\)"):  # F.mse_loss itself: refused
        _train(nn.Linear(10, 1), F.mse_loss, data)


def test_a_model_that_starts_with_an_embedding_keeps_its_integer_inputs():
    model = nn.Sequential(nn.Embedding(100, 8), nn.Flatten(), nn.Linear(80, 10))
    result = _fit(model, data=TensorDataset(X.abs().mul(10).long(), Y))
    assert result.status == "finished"


def test_the_kernels_refuse_an_infinite_lr():
    from workbench.kernels.optim_kernels import adam_step, sgd_step
    from workbench.kernels.optimizers import FusedSGD

    ones = lambda: np.ones(4, np.float32)  # noqa: E731
    with pytest.raises(ValueError, match=r"lr must be a finite number ≥ 0, got inf"):
        sgd_step(ones(), ones(), lr=float("inf"))
    with pytest.raises(ValueError, match=r"lr must be a finite number ≥ 0, got inf"):
        adam_step(ones(), ones(), ones(), ones(), step=1, lr=float("inf"))
    with pytest.raises(ValueError, match=r"lr must be a finite number ≥ 0, got inf"):
        FusedSGD([torch.nn.Parameter(torch.ones(4))], lr=float("inf"))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_a_row_of_only_minus_infinity_gives_nan_like_torch():
    from workbench.kernels.softmax_xent import softmax_cross_entropy, softmax_cross_entropy_spec

    logits = np.array([[-np.inf] * 4, [1.0, 2.0, 3.0, 4.0]], np.float32)
    targets = np.array([1, 2])
    expected = F.cross_entropy(torch.from_numpy(logits), torch.from_numpy(targets))
    loss, lse = softmax_cross_entropy(logits, targets)
    assert np.isnan(float(loss)) and torch.isnan(expected)
    assert lse[0] == -np.inf and lse[1] == pytest.approx(
        torch.logsumexp(torch.from_numpy(logits[1]), 0).item()
    )
    assert np.isnan(softmax_cross_entropy_spec(logits, targets)[0])


@pytest.mark.parametrize(
    ("metric", "said"),
    [
        (lambda out, batch: "n/a", r"returned 'n/a'; a metric function returns one number for the batch"),
        (lambda out, batch: None, r"returned None; a metric function returns one number"),
        (lambda out, batch: out[:, 0], r"returned an array of shape \(16,\); a metric function returns one"),
        (lambda out, batch: 1 / 0, r"division by zero"),
    ],
    ids=["string", "none", "vector", "raises"],
)
def test_a_failing_metric_is_named_on_the_first_training_batch_before_any_step(tmp_path, metric, said):
    """It used to fail at the first evaluation, an epoch later (issue 44): now before any step is spent."""
    trainer = Trainer(
        nn.Linear(10, 10), F.cross_entropy, (DATA, DATA), CONFIG, metrics={"recall": metric}, run="r",
        runs_dir=tmp_path,
    )  # fmt: skip
    first = r"^metrics\['recall'\] failed on the first training batch, before any step \(it runs on val "
    with pytest.raises(ValueError, match=first + r"after each epoch and on test at the end\): " + said):
        trainer.fit()
    assert trainer.step == 0


def test_a_metric_that_fails_only_at_evaluation_finds_its_epoch_saved_first(tmp_path):
    """Evaluation ran before the epoch's checkpoint: a metric that raised lost the epoch (issue 44)."""
    calls = []

    def fails_after_its_check(outputs, batch):
        calls.append(1)
        return 1 / 0 if len(calls) > 1 else 0.5

    trainer = Trainer(
        nn.Linear(10, 10), F.cross_entropy, (DATA, DATA), CONFIG, metrics={"recall": fails_after_its_check},
        run="r", runs_dir=tmp_path,
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"^metrics\['recall'\] failed: division by zero"):
        trainer.fit()
    assert (tmp_path / "r" / "checkpoint.pt").is_file()
    assert trainer.step == 4  # the epoch trained, and is kept


def test_numpy_numbers_and_one_element_arrays_are_numbers():
    from workbench.train.metrics import MeanOverSamples

    for value in (np.float32(0.5), np.int64(1), np.array([0.25]), torch.tensor([0.5]), 0.5, 2):
        assert MeanOverSamples(lambda out, batch, v=value: v, lambda batch: 4).sums(None, None).shape == (2,)


def test_a_checkpoint_whose_config_has_an_unknown_field_is_refused_in_one_line(tmp_path):
    Trainer(nn.Linear(10, 10), F.cross_entropy, DATA, CONFIG, run="r", runs_dir=tmp_path).fit()
    checkpoint = tmp_path / "r" / "checkpoint.pt"
    state = torch.load(checkpoint, weights_only=False)
    state["config"]["colour"] = "red"
    torch.save(state, checkpoint)
    again = Trainer(nn.Linear(10, 10), F.cross_entropy, DATA, TrainConfig(epochs=2, batch_size=16), run="r",
                    runs_dir=tmp_path)  # fmt: skip
    with pytest.raises(ValueError, match=r"^cannot resume from .*checkpoint.pt: the config has a field this "
                       r"version of workbench does not know: colour"):  # fmt: skip
        again.fit(resume=True)
