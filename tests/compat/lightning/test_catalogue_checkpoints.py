"""The paths a Lightning user hands to ``Model.load_from_checkpoint`` (``trainer.checkpoint_callback.best_model_path``,
``trainer.save_checkpoint(path)``'s file) and to ``fit(ckpt_path=...)``, under Lightning's own Trainer and under
``braeburn.lightning.Trainer`` in the same test: the real Lightning loads braeburn's files, with the weights and
hyperparameters a Lightning run gives."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.compat.catalogue import Catalogue, assert_on_purpose
from tests.compat.lightning.scripts import Classifier, classification_data, pl, quiet_trainer

CATALOGUE = Catalogue("lightning")
BRAEBURN_TRAINER = "braeburn.lightning.Trainer: "


def _trainer(root: Path, lightning: bool, **options: Any) -> Any:
    options = {"max_epochs": 2, "log_every_n_steps": 2, **options}
    if lightning:
        return quiet_trainer(root, False, **options)  # (its default logger: checkpoints in version_0, as braeburn)
    from braeburn.lightning import Trainer

    return Trainer(accelerator="cpu", devices=1, enable_progress_bar=False, default_root_dir=str(root), **options)


def _fit(root: Path, lightning: bool, ckpt_path: str | None = None, dropout: float = 0.0,
         **options: Any) -> tuple[Any, Classifier, str]:
    """A seeded Classifier fitted (printing into the returned text); the trainer and the module."""
    pl.seed_everything(0, verbose=False)
    module = Classifier(lr=0.2, dropout=dropout, scheduler="epoch")
    trainer = _trainer(root, lightning, **options)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        trainer.fit(module, classification_data(40, 8), classification_data(20, 6, seed=1), ckpt_path=ckpt_path)
    return trainer, module, printed.getvalue()


def _loaded(path: str) -> tuple[list[torch.Tensor], dict]:
    module = Classifier.load_from_checkpoint(path)  # Lightning's own classmethod
    return [value.detach().clone() for value in module.state_dict().values()], dict(module.hparams)


def _same_module(theirs: str, ours: str) -> None:
    (their_weights, their_hparams), (our_weights, our_hparams) = _loaded(theirs), _loaded(ours)
    assert our_hparams == their_hparams == {"lr": 0.2, "dropout": 0.0, "scheduler": "epoch"}
    assert len(our_weights) == len(their_weights) and all(torch.equal(a, b) for a, b in zip(our_weights, their_weights))


@CATALOGUE.idiom(BRAEBURN_TRAINER + "Model.load_from_checkpoint(trainer.checkpoint_callback.best_model_path)",
                 "identical", "the same `lightning_logs/version_0/checkpoints/epoch=1-step=10.ckpt`, which Lightning "
                 "loads with the weights (bitwise) and hyperparameters of Lightning's run; `last_model_path` is '', "
                 "as Lightning's default ModelCheckpoint")
def _best_model_path(tmp_path: Path) -> None:
    theirs, _, _ = _fit(tmp_path / "lightning", True)
    ours, _, _ = _fit(tmp_path / "braeburn", False)
    their_path, our_path = theirs.checkpoint_callback.best_model_path, ours.checkpoint_callback.best_model_path
    assert Path(our_path).relative_to(tmp_path / "braeburn") == Path(their_path).relative_to(tmp_path / "lightning")
    assert ours.checkpoint_callback.last_model_path == theirs.checkpoint_callback.last_model_path == ""
    assert sorted(p.name for p in Path(our_path).parent.glob("*.ckpt")) == [Path(their_path).name]  # the latest kept
    _same_module(their_path, our_path)


@CATALOGUE.idiom(BRAEBURN_TRAINER + "trainer.save_checkpoint('model.ckpt'); Model.load_from_checkpoint('model.ckpt')",
                 "on purpose", "Lightning loads it with the weights (bitwise) and hyperparameters of Lightning's run; "
                 "the file holds what Lightning's weights_only=True file holds but its `loops` (the optimizer and "
                 "the run's position stay in braeburn's checkpoint folder); one line says so, naming weights_only")
def _save_checkpoint(tmp_path: Path) -> None:
    theirs, _, _ = _fit(tmp_path / "lightning", True)
    ours, _, printed = _fit(tmp_path / "braeburn", False)
    theirs.save_checkpoint(str(tmp_path / "lightning" / "model.ckpt"), weights_only=True)
    said = io.StringIO()
    with contextlib.redirect_stdout(said):
        ours.save_checkpoint(str(tmp_path / "braeburn" / "model.ckpt"))
    _same_module(str(tmp_path / "lightning" / "model.ckpt"), str(tmp_path / "braeburn" / "model.ckpt"))
    their_keys = set(torch.load(tmp_path / "lightning" / "model.ckpt", weights_only=False))
    our_content = torch.load(tmp_path / "braeburn" / "model.ckpt", weights_only=True)  # plain data
    assert set(our_content) == their_keys - {"loops"}
    assert (our_content["epoch"], our_content["global_step"]) == (theirs.current_epoch, theirs.global_step)
    line = assert_on_purpose((printed + said.getvalue()).splitlines(), "weights_only")
    assert "Model.load_from_checkpoint" in line and "checkpoint-S" in line


@CATALOGUE.idiom(BRAEBURN_TRAINER + "trainer.fit(model, ckpt_path=trainer.checkpoint_callback.best_model_path)",
                 "identical", "resumes braeburn's checkpoint folder that the .ckpt stands beside: the losses after "
                 "it are Lightning's resumed run's, bitwise")
def _resume_from_best(tmp_path: Path) -> None:
    losses = {}
    for name, lightning in (("lightning", True), ("braeburn", False)):
        first, _, _ = _fit(tmp_path / name, lightning, max_epochs=1)
        _, module, _ = _fit(tmp_path / name, lightning, first.checkpoint_callback.best_model_path, max_epochs=3)
        losses[name] = module.losses
    assert losses["braeburn"] == losses["lightning"] and len(losses["lightning"]) == 10


def _resumed_with_dropout(root: Path, lightning: bool) -> tuple[list[float], torch.Tensor]:
    """One epoch of a module with dropout, then a fresh module resumed from its .ckpt to three epochs: the resumed
    run's losses, and torch's random state after it."""
    first, _, _ = _fit(root, lightning, max_epochs=1, dropout=0.3)
    _, module, _ = _fit(root, lightning, first.checkpoint_callback.best_model_path, max_epochs=3, dropout=0.3)
    return module.losses, torch.get_rng_state()


@CATALOGUE.idiom(BRAEBURN_TRAINER + "fit(model, ckpt_path=best_model_path) with nn.Dropout in the model",
                 "identical", "the random states stay the script's, as Lightning's (its .ckpt holds none): the "
                 "resumed run's dropout masks and losses are Lightning's resumed run's, bitwise, and torch's random "
                 "state after fit() is Lightning's")
def _resume_with_dropout(tmp_path: Path) -> None:
    their_losses, their_state = _resumed_with_dropout(tmp_path / "lightning", True)
    our_losses, our_state = _resumed_with_dropout(tmp_path / "braeburn", False)
    assert our_losses == their_losses and len(their_losses) == 10
    assert torch.equal(our_state, their_state)


@CATALOGUE.idiom(BRAEBURN_TRAINER + "Trainer(logger=False); Model.load_from_checkpoint(best_model_path)",
                 "on purpose", "the same weights (bitwise) and hyperparameters; Lightning writes "
                 "`default_root_dir/checkpoints/epoch=1-step=10.ckpt` and its `log_dir` is `default_root_dir`, "
                 "braeburn keeps its run folder `lightning_logs/version_0` (its checkpoint folders resume from there) "
                 "with the .ckpt in its `checkpoints/`; one line says so, naming logger=False and both folders")
def _no_logger(tmp_path: Path) -> None:
    theirs, _, _ = _fit(tmp_path / "lightning", True, logger=False)
    ours, _, printed = _fit(tmp_path / "braeburn", False, logger=False)
    their_path, our_path = theirs.checkpoint_callback.best_model_path, ours.checkpoint_callback.best_model_path
    assert Path(their_path) == tmp_path / "lightning" / "checkpoints" / "epoch=1-step=10.ckpt"
    assert Path(our_path) == tmp_path / "braeburn" / "lightning_logs" / "version_0" / "checkpoints" / \
        "epoch=1-step=10.ckpt"
    _same_module(their_path, our_path)
    line = assert_on_purpose(printed.splitlines(), "logger=False")
    assert str(Path(our_path).parent) in line and str(tmp_path / "braeburn" / "checkpoints") in line
    assert ours.log_dir in line and "default_root_dir" in line


def test_with_logger_false_one_line_says_where_the_run_writes(tmp_path):
    """The fast tier's check: the line names the run folder and, with checkpointing off, no .ckpt folder."""
    ours, _, printed = _fit(tmp_path, False, max_epochs=1, logger=False, enable_checkpointing=False)
    line = assert_on_purpose(printed.splitlines(), "logger=False")
    assert ours.log_dir in line and ".ckpt" not in line
    _, _, printed = _fit(tmp_path / "logged", False, max_epochs=1)
    assert "logger=False" not in printed


def test_no_line_speaks_of_accelerates_save_state_in_a_lightning_run(tmp_path):
    """A Lightning script never calls Accelerate's save_state()/load_state(): braeburn's lines about those calls
    (Accelerate's file names, a DataLoader resumed part way) are not printed by its saves and resumes."""
    first, _, printed = _fit(tmp_path, False, max_epochs=1)
    _, _, resumed = _fit(tmp_path, False, first.checkpoint_callback.best_model_path, max_epochs=2)
    assert "resumed from" in resumed
    assert not [line for line in (printed + resumed).splitlines() if "save_state()" in line or "load_state()" in line]


@pytest.mark.parametrize("relative", [False, True])
def test_a_resume_with_nothing_to_train_keeps_best_model_path_as_lightning(tmp_path, monkeypatch, relative):
    """Resumed from epoch 0's .ckpt with max_epochs=1 (nothing left to train): best_model_path is the resumed file,
    as Lightning's reloaded ModelCheckpoint says, and no .ckpt is written in the new run folder (there was one
    named epoch=1, standing for no checkpoint folder there); then a run that trains writes its own."""
    monkeypatch.chdir(tmp_path)
    paths, written = {}, {}
    for name, lightning in (("lightning", True), ("braeburn", False)):
        root = Path(name) if relative else tmp_path / name
        first, _, _ = _fit(root, lightning, max_epochs=1)
        resumed, module, _ = _fit(root, lightning, first.checkpoint_callback.best_model_path, max_epochs=1)
        assert module.losses == []
        paths[name] = Path(resumed.checkpoint_callback.best_model_path).resolve().relative_to(tmp_path / name)
        written[name] = sorted(p.name for p in (tmp_path / name / "lightning_logs" / "version_1").glob("*/*.ckpt"))
        trained, _, _ = _fit(root, lightning, first.checkpoint_callback.best_model_path, max_epochs=2)
        paths[name + " trained"] = Path(trained.checkpoint_callback.best_model_path).resolve().relative_to(
            tmp_path / name)
    assert paths["braeburn"] == paths["lightning"] == Path("lightning_logs/version_0/checkpoints/epoch=0-step=5.ckpt")
    assert written["braeburn"] == written["lightning"] == []
    assert paths["braeburn trained"] == paths["lightning trained"] == Path(
        "lightning_logs/version_2/checkpoints/epoch=1-step=10.ckpt")


def test_a_ckpt_edited_after_braeburn_wrote_it_is_refused_not_passed_over(tmp_path):
    """fit(ckpt_path=<epoch .ckpt>) resumes the braeburn folder beside the file: a file whose weights were changed
    since (here one weight, by hand) is refused by name, rather than its weights silently ignored."""
    from braeburn.lightning import LightningArgumentError

    first, _, _ = _fit(tmp_path, False, max_epochs=1)
    path = Path(first.checkpoint_callback.best_model_path)
    content = torch.load(path, weights_only=True)
    name = next(iter(content["state_dict"]))
    content["state_dict"][name] = content["state_dict"][name] + 1.0
    torch.save(content, path)
    with pytest.raises(LightningArgumentError, match=rf"the file's weights are not that folder's \({name} differ"):
        _fit(tmp_path, False, str(path), max_epochs=2)


def test_lightnings_own_fit_refuses_to_resume_braeburns_ckpt(tmp_path):
    """Lightning's own Trainer given braeburn's .ckpt to resume: Lightning's error for a weights-only file, before
    anything is trained, never a silent restart from epoch 0."""
    ours, _, _ = _fit(tmp_path / "braeburn", False, max_epochs=1)
    module = Classifier(lr=0.2, scheduler="epoch")
    with pytest.raises(KeyError, match="contains only the model"):
        _trainer(tmp_path / "lightning", True, max_epochs=2).fit(
            module, classification_data(40, 8), ckpt_path=ours.checkpoint_callback.best_model_path)
    assert module.losses == []


def test_save_checkpoint_writes_over_no_file_braeburn_did_not_write(tmp_path):
    from braeburn.lightning import LightningArgumentError

    ours, _, _ = _fit(tmp_path, False, max_epochs=1, enable_checkpointing=False)
    assert ours.checkpoint_callback is None  # as Lightning with enable_checkpointing=False
    theirs = tmp_path / "mine.ckpt"
    theirs.write_bytes(b"the user's own file")
    with pytest.raises(LightningArgumentError, match="is not a Lightning checkpoint file") as caught:
        ours.save_checkpoint(str(theirs))
    assert str(theirs) in str(caught.value) and theirs.read_bytes() == b"the user's own file"
    ours.save_checkpoint(str(tmp_path / "model.ckpt"))
    ours.save_checkpoint(str(tmp_path / "model.ckpt"))  # its own file, written again
    assert Classifier.load_from_checkpoint(str(tmp_path / "model.ckpt")).hparams.lr == 0.2
    assert not list(tmp_path.glob(".*.tmp")) and sorted(p.name for p in tmp_path.glob("*.ckpt")) == [
        "mine.ckpt", "model.ckpt"]


def test_a_rerun_script_saves_over_its_earlier_runs_ckpt_as_lightning(tmp_path):
    """`python train.py` run twice, ending in trainer.save_checkpoint('model.ckpt'): the second run writes over the
    first's file, as Lightning's does (under either Trainer, from either Trainer's file), after training; a link
    planted there is still refused, and what it points at left alone."""
    from braeburn.lightning import LightningArgumentError

    target = tmp_path / "model.ckpt"
    for lightning in (True, False, True, False):  # each fit a new Trainer, as a new process's
        trainer, _, _ = _fit(tmp_path / "runs", lightning, max_epochs=1, enable_checkpointing=False)
        trainer.save_checkpoint(str(target))
        assert Classifier.load_from_checkpoint(str(target)).hparams.lr == 0.2
    elsewhere = tmp_path / "elsewhere.ckpt"
    elsewhere.write_bytes(target.read_bytes())
    before = elsewhere.read_bytes()
    link = tmp_path / "link.ckpt"
    link.symlink_to(elsewhere)
    with pytest.raises(LightningArgumentError, match="is not a Lightning checkpoint file"):
        _fit(tmp_path / "runs", False, max_epochs=1, enable_checkpointing=False)[0].save_checkpoint(str(link))
    assert link.is_symlink() and link.resolve() == elsewhere and elsewhere.read_bytes() == before


@pytest.mark.slow  # two or four fits each
@pytest.mark.parametrize("idiom", CATALOGUE.params())
def test_lightning_checkpoint_idiom(idiom, tmp_path):
    idiom.run(tmp_path)


def test_what_checkpoint_callback_lacks_is_refused_by_name(tmp_path):
    from braeburn.lightning import LightningArgumentError

    ours, _, _ = _fit(tmp_path, False, max_epochs=1)
    callback = ours.checkpoint_callback
    assert callback.dirpath == str(Path(callback.best_model_path).parent) and callback.best_model_score is None
    with pytest.raises(LightningArgumentError, match=r"checkpoint_callback\.save_top_k"):
        callback.save_top_k
