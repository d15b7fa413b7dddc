import pytest
import torch

from workbench.train import load_checkpoint, save_checkpoint


class _Evil:
    def __reduce__(self):
        return (print, ("this code ran while loading",))


def test_round_trip(tmp_path):
    state = {
        "step": 7,
        "w": torch.arange(4.0),
        "nested": {"betas": (0.9, 0.99)},
        "rng": torch.get_rng_state(),
    }
    loaded = load_checkpoint(save_checkpoint(state, tmp_path / "a" / "ckpt.pt"))
    assert loaded["step"] == 7 and torch.equal(loaded["w"], state["w"])
    assert loaded["nested"]["betas"] == (0.9, 0.99) and torch.equal(loaded["rng"], state["rng"])


def test_failed_write_keeps_the_previous_checkpoint_and_leaves_no_temp_file(tmp_path, monkeypatch):
    path = save_checkpoint({"step": 1}, tmp_path / "ckpt.pt")

    def broken_save(obj, file):
        file.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint({"step": 2}, path)
    monkeypatch.undo()
    assert load_checkpoint(path)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]


def test_loading_refuses_pickled_code(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"payload": _Evil()}, path)
    with pytest.raises(
        ValueError, match=r"holds Python objects .* it was not loaded, since loading would run"
    ):
        load_checkpoint(path)


def test_missing_checkpoint_says_where_it_looked(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "nothing.pt")
