"""The run's files tell what trains, and a refused resume leaves the model as it was (issue 44: config.json
said clip_norm 1.0 while 0.0 was used; a dashboard's lr never reached it; a checkpoint with an extra layer
had overwritten the matching tensors before the resume was refused)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from workbench.train import Callback, TrainConfig, Trainer
from workbench.train.control import TrainControl

X = torch.randn(64, 10, generator=torch.Generator().manual_seed(0))
DATA = TensorDataset(X, torch.arange(64) % 3)


def _model(*extra: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(10, 8), nn.ReLU(), nn.Linear(8, 3), *extra)


def _config(path) -> dict:
    return json.loads((path / "config.json").read_text())


@pytest.mark.parametrize("field", ["clip_norm", "clip_value"])
def test_a_resume_with_new_clipping_trains_with_it_and_records_it(tmp_path, field, capsys):
    Trainer(
        _model(), F.cross_entropy, DATA, TrainConfig(epochs=1, batch_size=16), run="r", runs_dir=tmp_path
    ).fit()
    config = TrainConfig(epochs=2, batch_size=16, **{field: 1.0})
    trainer = Trainer(_model(), F.cross_entropy, DATA, config, run="r", runs_dir=tmp_path)
    trainer.fit(resume=True)
    assert getattr(trainer.settings, field) == 1.0 == _config(tmp_path / "r")[field]
    assert f"with new settings: {field} 0.0 → 1.0" in capsys.readouterr().err


def test_a_change_from_the_dashboard_is_what_config_json_says(tmp_path):
    control = TrainControl()

    class ChangeAtStep2(Callback):
        def on_step(self, event):
            if event["step"] == 2:
                control.set_lr(0.5)
                control.set_clipping(norm=0.75)

    config = TrainConfig(epochs=1, batch_size=8, log_every=1)
    trainer = Trainer(
        _model(), F.cross_entropy, DATA, config, run="live", runs_dir=tmp_path, control=control,
        callbacks=[ChangeAtStep2()],
    )  # fmt: skip
    trainer.fit()
    recorded = _config(tmp_path / "live")
    assert (trainer.settings.lr, trainer.settings.clip_norm) == (0.5, 0.75)
    assert (recorded["optimizer"]["lr"], recorded["clip_norm"]) == (0.5, 0.75)
    # and a resume continues with them, and says so again
    again = Trainer(
        _model(), F.cross_entropy, DATA, TrainConfig(epochs=2, batch_size=8), run="live", runs_dir=tmp_path
    )
    again.fit(resume=True)
    assert (
        (again.settings.lr, again.settings.clip_norm)
        == (0.5, 0.75)
        == (_config(tmp_path / "live")["optimizer"]["lr"], 0.75)
    )


def test_a_refused_resume_leaves_every_tensor_of_the_model_as_it_was(tmp_path):
    Trainer(_model(nn.Linear(3, 3)), F.cross_entropy, DATA, TrainConfig(epochs=1, batch_size=16), run="r",
            runs_dir=tmp_path).fit()  # fmt: skip
    model = _model()
    before = {key: value.clone() for key, value in model.state_dict().items()}
    trainer = Trainer(
        model, F.cross_entropy, DATA, TrainConfig(epochs=2, batch_size=16), run="r", runs_dir=tmp_path
    )
    unexpected = (
        r"its weights do not fit this model \(Unexpected key\(s\) in state_dict: '3.weight', '3.bias'"
    )
    with pytest.raises(ValueError, match=unexpected):
        trainer.fit(resume=True)
    assert all(torch.equal(before[key], value) for key, value in model.state_dict().items())
    # a layer of another size: refused the same way, before any copy
    Trainer(nn.Sequential(nn.Linear(10, 5), nn.ReLU(), nn.Linear(5, 3)), F.cross_entropy, DATA,
            TrainConfig(epochs=1, batch_size=16), run="wide", runs_dir=tmp_path).fit()  # fmt: skip
    trainer = Trainer(
        model, F.cross_entropy, DATA, TrainConfig(epochs=2, batch_size=16), run="wide", runs_dir=tmp_path
    )
    with pytest.raises(
        ValueError, match=r"size mismatch for 0.weight: copying a param with shape \(5, 10\)"
    ) as info:
        trainer.fit(resume=True)
    assert all(torch.equal(before[key], value) for key, value in model.state_dict().items())
    # and it names both models, from the summary the checkpoint keeps
    assert "; it holds a Sequential, 73 parameters (#" in str(info.value)
    assert ", this is a Sequential, 115 parameters (#" in str(info.value)


def test_a_resume_whose_weights_fit_another_model_says_so(tmp_path, capsys):
    """The same parameters with another activation load without a word from torch; the resume names both."""
    config = TrainConfig(epochs=1, batch_size=16)
    Trainer(_model(), F.cross_entropy, DATA, config, run="r", runs_dir=tmp_path).fit()
    tanh = nn.Sequential(nn.Linear(10, 8), nn.Tanh(), nn.Linear(8, 3))
    Trainer(
        tanh, F.cross_entropy, DATA, TrainConfig(epochs=2, batch_size=16), run="r", runs_dir=tmp_path
    ).fit(resume=True)
    said = capsys.readouterr().err
    assert "with new settings: model 'Sequential, 115 parameters (#" in said
    relu_digest, tanh_digest = (m.split("(#")[1][:8] for m in said.split(" → ")[:2])
    assert relu_digest != tanh_digest
    # the same model again: nothing to say
    Trainer(
        tanh, F.cross_entropy, DATA, TrainConfig(epochs=3, batch_size=16), run="r", runs_dir=tmp_path
    ).fit(resume=True)
    assert "new settings" not in capsys.readouterr().err


@pytest.mark.parametrize("name", ["metrics.jsonl", "config.json", ".lock"])
def test_a_symlink_planted_in_the_run_folder_is_refused_and_its_target_untouched(tmp_path, name):
    """Issue 44: links in a run folder were followed, so a fit could overwrite any file its user can write."""
    folder = tmp_path / "runs" / "r"
    folder.mkdir(parents=True)
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    (folder / name).symlink_to(target)
    trainer = Trainer(_model(), F.cross_entropy, DATA, TrainConfig(epochs=1, batch_size=16), run="r",
                      runs_dir=tmp_path / "runs")  # fmt: skip
    with pytest.raises(
        OSError, match=rf"refusing to write .*r/{name}: it is a symbolic link \(to {target}\)"
    ):
        trainer.fit()
    assert target.read_text() == "keep me"


def test_a_fresh_fit_on_a_name_that_holds_a_run_is_refused_unless_overwrite(tmp_path):
    """A fresh fit used to rewrite the run's log and checkpoint without a word (issue 44)."""
    config = TrainConfig(epochs=1, batch_size=8)
    Trainer(_model(), F.cross_entropy, DATA, config, run="kept", runs_dir=tmp_path).fit()
    log = (tmp_path / "kept" / "metrics.jsonl").read_text()
    again = Trainer(_model(), F.cross_entropy, DATA, config, run="kept", runs_dir=tmp_path)
    with pytest.raises(
        ValueError, match=r"the run 'kept' already holds a run \(metrics.jsonl and "
    ) as refused:
        again.fit()
    for fix in ("fit(resume=True) (--resume)", "another run name", "overwrite=True) (--overwrite)"):
        assert fix in str(refused.value)
    assert (tmp_path / "kept" / "metrics.jsonl").read_text() == log and again.step == 0
    assert again.fit(resume=True).epoch == 1  # resuming it is allowed: nothing left to train
    fresh = Trainer(_model(), F.cross_entropy, DATA, config, run="kept", runs_dir=tmp_path, overwrite=True)
    assert fresh.fit().step == 8 and (tmp_path / "kept" / "metrics.jsonl").read_text() != log
