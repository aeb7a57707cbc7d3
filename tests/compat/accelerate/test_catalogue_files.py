"""Accelerate's idioms that write files (checkpoints, saved models, trackers), one process: each written as
Accelerate 1.15's docs write it, run under ``accelerate.Accelerator`` and ``braeburn.Accelerator`` in the same test,
comparing the files written (names), the values restored and what braeburn says. See tests/compat/catalogue.py."""

from __future__ import annotations

import importlib.util
import warnings

import pytest

from tests.compat.accelerate._peers import cpu_for_accelerate  # noqa: F401  (an autouse fixture)
from tests.compat.accelerate._peers import (Counter, both, files, identical as _identical, loader, reset_accelerate, setup,
                                           step, weights)
from tests.compat.accelerate._peers import library as library_of
from tests.compat._tensorboard import RANDOM_SUFFIX, shown, tensorboard_view, unsuffixed
from tests.compat.catalogue import Catalogue, Observation, assert_identical, assert_on_purpose, assert_refused

CATALOGUE = Catalogue("accelerate")
idiom = CATALOGUE.idiom


# -- checkpoints ------------------------------------------------------------------------------------------
# save_state() writes Accelerate's names where the content is Accelerate's; braeburn's own RNG, loader-position,
# accelerator and manifest files replace random_states_<rank>.pkl (a pickle braeburn would have to load unsafely).
PEER_ONLY = ("random_states_0.pkl",)
OURS_ONLY = ("rng_state_0.pt", "accelerator.pt", "manifest.json", "dataloader_0.pt", "dataloader_1.pt")
LOCK = (".braeburn.lock",)  # beside the newest folder while the run lives (the scripts list files before their end)
SAVE_STATE_LINE = "save_state()"


def _on_purpose_files(peer, ours, said):
    assert_on_purpose(said, SAVE_STATE_LINE)
    assert_identical(peer, ours)


def _train_save_resume(lib, folder, save, load):
    """Two batches, save, two more (the expected losses); a fresh run that loads the state plays the same two."""
    accelerator, net, optimizer, data = setup(lib, data=loader(n=16, batch_size=4, shuffle=True))
    batches = iter(data)
    first = [step(accelerator, net, optimizer, next(batches)) for _ in range(2)]
    save(accelerator)
    expected = [step(accelerator, net, optimizer, batch) for batch in batches]
    again, net2, optimizer2, data2 = setup(lib, data=loader(n=16, batch_size=4, shuffle=True))
    load(again)
    resumed = [step(again, net2, optimizer2, batch) for batch in again.skip_first_batches(data2, 2)]
    return first + expected, resumed


@idiom("accelerator.save_state('ckpt') mid-epoch / accelerator.load_state('ckpt') + skip_first_batches, "
       "a shuffled DataLoader", "on purpose",
       "save_state() says once that braeburn writes its own rng_state_<rank>.pt, dataloader_<i>.pt, accelerator.pt "
       "and manifest.json where Accelerate writes random_states_<rank>.pkl (model.safetensors, optimizer.bin are "
       "Accelerate's); load_state() says that the epoch resumes in its saved order: the resumed losses are bitwise "
       "the uninterrupted ones, where Accelerate's resumed epoch is shuffled anew")
def _save_and_load_state(tmp_path):
    def script(lib, folder):
        losses, resumed = _train_save_resume(lib, folder, lambda a: a.save_state(str(folder / "ckpt")),
                                             lambda a: a.load_state(str(folder / "ckpt")))
        return Observation(losses=losses, files=files(folder, leave_out=PEER_ONLY + OURS_ONLY + LOCK),
                           metrics={"resumed as uninterrupted": resumed == losses[2:]})

    peer, ours, said = both(script, tmp_path)
    assert peer.metrics == {"resumed as uninterrupted": False} and ours.metrics == {"resumed as uninterrupted": True}
    assert_on_purpose(said, "load_state()")
    assert_on_purpose(said, "save_state()")
    assert_identical(peer, ours, ignore=["metrics"])


@idiom("ProjectConfiguration(project_dir, automatic_checkpoint_naming=True, total_limit=2) + save_state() x3 + "
       "load_state()", "on purpose", "the same checkpoints/checkpoint_<n> folders (the oldest removed) and files "
       "but braeburn's own (said once by save_state()), none left behind; load_state() reads the newest")
def _automatic_naming(tmp_path):
    def script(lib, folder):
        config = lib.ProjectConfiguration(project_dir=str(folder), automatic_checkpoint_naming=True, total_limit=2)
        accelerator, net, optimizer, data = setup(lib, project_config=config)
        for batch in data:
            step(accelerator, net, optimizer, batch)
            accelerator.save_state()
        expected = weights(net)
        net.weight.data.zero_()
        accelerator.load_state()
        accelerator.end_training()
        return Observation(files=files(folder, leave_out=PEER_ONLY + OURS_ONLY),
                           extra={"restored": weights(net) == expected,
                                  "iteration": accelerator.project_configuration.iteration})

    _on_purpose_files(*both(script, tmp_path))


@idiom("a rerun into the same project_dir with automatic_checkpoint_naming=True, total_limit=1 (the first run left "
       "only checkpoint_1)", "refused",
       "pass another project_dir, or set project_configuration.iteration past the earlier run's checkpoints; "
       "Accelerate would delete the earlier run's checkpoint_1 and write checkpoint_0")
def _rerun_into_the_same_project_dir(tmp_path):
    def script(lib, folder):
        config = dict(project_dir=str(folder), automatic_checkpoint_naming=True, total_limit=1)
        first, *_ = setup(lib, project_config=lib.ProjectConfiguration(**config))
        first.save_state()
        first.save_state()  # checkpoint_0 deleted by total_limit: checkpoint_1 is left
        first.end_training()
        reset_accelerate()
        second, *_ = setup(lib, project_config=lib.ProjectConfiguration(**config))
        try:
            second.save_state()
            refused = None
        except Exception as error:  # noqa: BLE001 - the refusal is the observation
            refused = error
        second.end_training()
        return Observation(files=sorted(p.name for p in (folder / "checkpoints").iterdir()
                                        if not p.name.startswith(".")), extra={"refused": refused})

    peer, ours, _ = both(script, tmp_path)
    assert peer.extra["refused"] is None and peer.files == ["checkpoint_0"]  # Accelerate: checkpoint_1 deleted
    assert ours.files == ["checkpoint_1"]  # braeburn: nothing written, nothing deleted
    message = str(ours.extra["refused"])
    assert_refused(ours.extra["refused"], ["checkpoint_1", "iteration 0", "earlier run"],
                   ["Pass another project_dir", "iteration = 2"])
    assert ("Accelerate would delete checkpoint_1 for total_limit=1 and then write checkpoint_0; braeburn refuses: "
            "that would delete the earlier run's checkpoint.") in message
    assert "as Accelerate does not" not in message


@idiom("accelerator.register_for_checkpointing(obj) + save_state / load_state", "on purpose",
       "custom_checkpoint_0.pkl as Accelerate names it (plain data, loaded with weights_only); save_state()'s line")
def _register_for_checkpointing(tmp_path):
    def script(lib, folder):
        accelerator, net, optimizer, data = setup(lib)
        counter = Counter()
        accelerator.register_for_checkpointing(counter)
        counter.count = 7
        accelerator.save_state(str(folder / "ckpt"))
        counter.count = 0
        accelerator.load_state(str(folder / "ckpt"))
        return Observation(files=files(folder, leave_out=PEER_ONLY + OURS_ONLY + LOCK),
                           extra={"count": counter.count})

    _on_purpose_files(*both(script, tmp_path))


class _NumpyScores:
    """A metric tracker's state, as such objects often hold it: numpy values."""

    def state_dict(self):
        import numpy

        return {"best": numpy.float64(0.5), "history": numpy.arange(3)}

    def load_state_dict(self, state):
        self.best = state["best"]


def _refused_in(tmp_path, build, idiom_words, way_out_words):
    """Accelerate takes ``build(lib, folder)``; braeburn refuses it in one error of its own, naming the way out."""
    from tests.compat.accelerate._peers import library, reset_accelerate, seed_all
    from tests.compat.catalogue import assert_refused

    for name in ("accelerate", "braeburn"):
        (tmp_path / name).mkdir()
        reset_accelerate()
        seed_all()
        if name == "accelerate":
            build(library(name), tmp_path / name)
            continue
        with pytest.raises(Exception) as raised:
            build(library(name), tmp_path / name)
        assert_refused(raised.value, idiom_words, way_out_words)
    reset_accelerate()


@idiom("accelerator.register_for_checkpointing(obj) whose state_dict() holds numpy values + save_state / load_state",
       "refused", "save_state() refuses it before writing (load_state() reads plain data only): return tensors, "
       "numbers, strings, lists and dicts from state_dict()")
def _register_numpy_state(tmp_path):
    def build(lib, folder):
        accelerator, net, optimizer, data = setup(lib)
        accelerator.register_for_checkpointing(_NumpyScores())
        accelerator.save_state(str(folder / "ckpt"))
        accelerator.load_state(str(folder / "ckpt"))

    _refused_in(tmp_path, build, ["registered object 0 (_NumpyScores)", "numpy"],
                ["Fix: return tensors, numbers, strings, lists and dicts from state_dict()"])


@idiom("accelerator.load_state(folder) of a folder Accelerate's save_state() wrote", "refused",
       "resume it with Accelerate, or carry its weights over (model.safetensors, optimizer.bin: the message writes "
       "the two lines)")
def _load_accelerates_folder(tmp_path):
    pytest.importorskip("accelerate")
    written = tmp_path / "written"
    written.mkdir()
    saver, net, optimizer, data = setup(library_of("accelerate"))
    saver.save_state(str(written / "ckpt"))

    def build(lib, folder):
        accelerator, net, optimizer, data = setup(lib)
        accelerator.load_state(str(written / "ckpt"))

    _refused_in(tmp_path, build, ["load_state(", "written by Accelerate's save_state()"],
                ["Fix: resume it with Accelerate, or carry its weights over"])


@idiom("accelerator.save_model(model, 'out') + accelerator.save(obj, 'out/extra.pt')", "identical",
       "the same files, the same tensors")
def _save_model(tmp_path):
    from safetensors.torch import load_file

    def script(lib, folder):
        accelerator, net, optimizer, data = setup(lib)
        accelerator.wait_for_everyone()
        accelerator.save_model(net, str(folder / "out"))
        accelerator.save({"epoch": 3}, str(folder / "out" / "extra.pt"))
        saved = load_file(str(folder / "out" / "model.safetensors"))
        return Observation(files=files(folder), extra={k: v.tolist() for k, v in saved.items()})

    _identical(script, tmp_path)


@idiom("accelerator.save_model(model, 'out', safe_serialization=False)", "identical",
       "the same pytorch_model.bin, the same tensors")
def _save_model_pickled(tmp_path):
    import torch

    def script(lib, folder):
        accelerator, net, optimizer, data = setup(lib)
        accelerator.save_model(net, str(folder / "out"), safe_serialization=False)
        saved = torch.load(folder / "out" / "pytorch_model.bin", weights_only=True)
        return Observation(files=files(folder), extra={k: v.tolist() for k, v in saved.items()})

    _identical(script, tmp_path)


@idiom("accelerator.save_state('ckpt', safe_serialization=False)", "on purpose",
       "one line says that the weights stay model.safetensors (Accelerate writes pytorch_model.bin): braeburn "
       "writes no pickled weights")
def _save_state_pickled(tmp_path):
    def script(lib, folder):
        accelerator, net, optimizer, data = setup(lib)
        accelerator.save_state(str(folder / "ckpt"), safe_serialization=False)
        return Observation(files=files(folder, leave_out=PEER_ONLY + OURS_ONLY + LOCK))

    peer, ours, said = both(script, tmp_path)
    assert "ckpt/pytorch_model.bin" in peer.files and "ckpt/model.safetensors" in ours.files
    assert_on_purpose(said, "safe_serialization=False")
    assert_on_purpose(said, "save_state()")
    assert_identical(peer, ours, ignore=["files"])
    assert [f for f in peer.files if "model" not in f] == [f for f in ours.files if "model" not in f]


# -- trackers ---------------------------------------------------------------------------------------------

@idiom("Accelerator(log_with='all', project_dir=...) + init_trackers(config=...) / log / end_training",
       "identical", "the same trackers (every one of Accelerate's that is installed: TensorBoard where the "
       "tensorboard package is, else none) and files: run/ with the event file, run/<time>/ with the "
       "hyperparameters' event file, run/<time>/hparams.yml; TensorBoard shows the same scalars, texts, steps and "
       "hyperparameters; braeburn's event file names end in 8 random hex characters (docs/reliability.md); with "
       "none installed, Accelerate's warning, word for word")
def _log_with_all(tmp_path):
    def script(lib, folder):
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            accelerator = lib.Accelerator(log_with="all", project_dir=str(folder))
        accelerator.init_trackers("run", config={"lr": 0.1, "epochs": 2, "optimizer": "adamw", "warmup": None})
        accelerator.log({"loss": 0.5, "accuracy": 0.75, "phase": "train"}, step=1)
        accelerator.log({"loss": 0.25}, step=2)
        accelerator.end_training()
        written = [shown(path) for path in files(folder)]
        yml = [(folder / path).read_text() for path in files(folder) if path.endswith("hparams.yml")]
        return Observation(files=written, metrics={"tensorboard": tensorboard_view(folder), "hparams.yml": yml},
                           extra={"trackers": [t.name for t in accelerator.trackers],
                                  "warned": [str(w.message) for w in warned if "tracker" in str(w.message)]})

    peer, ours, said = both(script, tmp_path)
    assert said == [], f"braeburn said more than Accelerate: {said}"
    assert all(RANDOM_SUFFIX not in path for path in peer.files)
    assert all(RANDOM_SUFFIX in path for path in ours.files if "tfevents" in path)  # (the one difference)
    ours.files = unsuffixed(ours.files)
    ours.metrics["tensorboard"] = {path.removesuffix(f".{RANDOM_SUFFIX}"): seen
                                   for path, seen in ours.metrics["tensorboard"].items()}
    assert_identical(peer, ours)
    if importlib.util.find_spec("tensorboard") is not None:  # what the idiom writes with the package installed
        assert peer.extra["trackers"] == ["tensorboard"] and len(peer.files) == 3
        assert peer.metrics["tensorboard"]["run/events.out.tfevents.<time>.<host>.<pid>.<n>"]["scalars"]["loss"] == [
            (1, 0.5), (2, 0.25)]
    else:  # Accelerate's warning, and braeburn's, word for word
        assert peer.files == [] and peer.extra["trackers"] == [] and len(peer.extra["warned"]) == 1


@idiom("Accelerator(log_with='all') where a tracker braeburn lacks is installed (aim, comet_ml, clearml, dvclive, "
       "swanlab, trackio; TensorBoard through tensorboardX alone)", "refused",
       "names the trackers Accelerate's 'all' would start that braeburn cannot; the way out: name braeburn's trackers "
       "in log_with, and pass an object of a GeneralTracker subclass of yours for the others")
def _log_with_all_beyond_braeburn(tmp_path):
    import accelerate
    from accelerate import tracking

    import braeburn
    from braeburn.accelerator import trackers

    installed = [str(getattr(t, "value", t)) for t in tracking.get_available_trackers()]
    for extra, tensorboard_package in (("aim", True), ("tensorboard", False)):
        with pytest.MonkeyPatch.context() as patch:  # the tracker installed here, as Accelerate finds it
            patch.setattr(tracking, "get_available_trackers", lambda: [*installed, extra] if extra not in installed
                          else installed)
            if not tensorboard_package:  # tensorboardX alone: Accelerate's "all" has TensorBoard, braeburn's has not
                patch.setattr(trackers, "is_available", lambda name: name != "tensorboard")
            assert extra in [str(getattr(t, "value", t)) for t in accelerate.Accelerator(log_with="all").log_with]
            reset_accelerate()
            with pytest.raises(ValueError) as refused:
                braeburn.Accelerator(log_with="all", project_dir=str(tmp_path))
        assert_refused(refused.value, ["log_with='all'", extra], ["log_with=[", "GeneralTracker"])
        assert tensorboard_package or "pip install tensorboard" in str(refused.value)


def _tensorboard_run(lib, folder, config=None, logged=()):
    """log_with="tensorboard": init_trackers("run", config), each ``(values, step)`` logged, end_training; what was
    written (files, and what TensorBoard reads from each event file), and the error the script stopped on."""
    accelerator = lib.Accelerator(log_with="tensorboard", project_dir=str(folder))
    stopped = None
    try:
        accelerator.init_trackers("run", config=config)
        for values, at in logged:
            accelerator.log(values, step=at)
    except (ValueError, IndexError) as error:
        stopped = error
    accelerator.end_training()
    written = unsuffixed([shown(path) for path in files(folder)])
    view = {path.removesuffix(f".{RANDOM_SUFFIX}"): seen for path, seen in tensorboard_view(folder).items()}
    return Observation(files=written, metrics=view, extra={"stopped": stopped})


@idiom("accelerator.log({'loss': {'train': ..., 'val': ...}}, step=...) with log_with='tensorboard' (a dict: "
       "TensorBoard's add_scalars)", "identical", "the same files and what TensorBoard reads: one run per entry, "
       "run/loss_train/ and run/loss_val/, each with the scalar tagged loss at the same steps (a key with '/' as "
       "torch names it: a/b -> run/a_b_<entry>/); a link planted at such a folder is not written through "
       "(docs/reliability.md)")
def _log_dict_of_scalars(tmp_path):
    pytest.importorskip("tensorboard")
    import torch

    logged = [({"loss": {"train": 0.5, "val": torch.tensor(0.75)}, "a/b": {"x": 1}}, 1),
              ({"loss": {"train": 0.25, "val": 0.5}}, 2)]
    peer, ours = _identical(lambda lib, folder: _tensorboard_run(lib, folder, logged=logged), tmp_path)
    assert peer.files == ["run/a_b_x/events.out.tfevents.<time>.<host>.<pid>.<n>",
                          "run/events.out.tfevents.<time>.<host>.<pid>.<n>",
                          "run/loss_train/events.out.tfevents.<time>.<host>.<pid>.<n>",
                          "run/loss_val/events.out.tfevents.<time>.<host>.<pid>.<n>"]
    assert peer.metrics["run/loss_val/events.out.tfevents.<time>.<host>.<pid>.<n>"]["scalars"] == {
        "loss": [(1, 0.75), (2, 0.5)]}


@idiom("accelerator.log(...) with log_with='tensorboard' of a bool, NaN, inf, a numpy float32, a 0-d and a "
       "bfloat16 tensor, a list, None", "identical", "what TensorBoard reads is Accelerate's: a bool as 1.0, NaN and "
       "inf as scalars, tensors as their numbers; a numpy float32, a list and None are left out, as Accelerate's "
       "tracker leaves them out")
def _log_odd_values(tmp_path):
    pytest.importorskip("tensorboard")
    import numpy
    import torch

    logged = [({"flag": True, "nan": float("nan"), "inf": float("inf"), "f32": numpy.float32(0.5),
                "f64": numpy.float64(0.25), "t": torch.tensor(2.0), "bf": torch.tensor(1.5, dtype=torch.bfloat16),
                "list": [1, 2], "none": None, "note": "text"}, 3)]
    peer, _ = _identical(lambda lib, folder: _tensorboard_run(lib, folder, logged=logged), tmp_path)
    scalars = peer.metrics["run/events.out.tfevents.<time>.<host>.<pid>.<n>"]["scalars"]
    assert sorted(scalars) == ["bf", "f64", "flag", "inf", "nan", "t"] and scalars["flag"] == [(3, 1.0)]


@idiom("init_trackers(project, config={...}) with log_with='tensorboard' and a config value TensorBoard's "
       "hyperparameters cannot take (a list, a Path, a nested dict, a 0-d tensor), or log() of a dict holding text",
       "refused", "Accelerate stops inside TensorBoard (ValueError, IndexError); braeburn refuses first, naming the "
       "key and the way out (a number or str(value); text as its own key); None, bool and a 1-d tensor are taken "
       "as Accelerate takes them")
def _tensorboard_values_it_cannot_take(tmp_path):
    pytest.importorskip("tensorboard")
    from pathlib import Path

    import torch

    cases = [({"layers": [2, 3]}, (), ["config['layers']", "list"], ["str(value)"]),
             ({"data": Path("/tmp/data")}, (), ["config['data']", "PosixPath"], ["str(value)"]),
             ({"optimizer": {"lr": 0.1}}, (), ["config['optimizer']", "dict"], ["flat keys"]),
             ({"scale": torch.tensor(0.5)}, (), ["config['scale']", "0-d tensor"], ["value.item()"]),
             (None, [({"group": {"a": 1.0, "b": "x"}}, 1)], ["'group'", "add_scalars"], ["'group_b': text"])]
    for number, (config, logged, idiom_words, way_out) in enumerate(cases):
        folder = tmp_path / str(number)
        folder.mkdir()
        peer, ours, _ = both(lambda lib, where: _tensorboard_run(lib, where, config, logged), folder)
        assert peer.extra["stopped"] is not None, f"Accelerate took {config or logged}"
        assert_refused(ours.extra["stopped"], idiom_words, way_out)
    (tmp_path / "taken").mkdir()
    peer, ours = _identical(lambda lib, folder: _tensorboard_run(
        lib, folder, {"warmup": None, "fused": True, "betas": torch.tensor([0.9, 0.99])}), tmp_path / "taken")
    hparams = [seen["hparams"] for seen in peer.metrics.values() if seen["hparams"]]
    assert hparams == [{"fused": True, "betas": pytest.approx(0.9)}], hparams  # (TensorBoard shows no None)


def _recorder():
    """A GeneralTracker of Accelerate's (accelerate.tracking) that records every call it gets, in order."""
    from accelerate.tracking import GeneralTracker

    class Recorder(GeneralTracker):
        name = "recorder"
        requires_logging_directory = False

        def __init__(self):
            super().__init__()
            self.calls = []

        @property
        def tracker(self):
            return self.calls

        def store_init_configuration(self, values):
            self.calls.append(f"config {values}")

        def log(self, values, step=None, **kwargs):
            self.calls.append(f"log {values} {step}")

        def finish(self):
            self.calls.append("finish")

    return Recorder()


@idiom("accelerator.init_trackers(...) called a second time (another project name, or after end_training)",
       "refused", "Accelerate starts a second set of trackers beside the first, restarts the first and logs every "
       "value, and the second config, into both runs; braeburn refuses the second call, naming the way out (one "
       "init_trackers per Accelerator; another run: end_training() and a new Accelerator)")
def _init_trackers_twice(tmp_path):
    def script(lib, folder):
        recorder = _recorder()
        accelerator = lib.Accelerator(log_with=[recorder])
        accelerator.init_trackers("first", config={"lr": 0.1})
        accelerator.end_training()
        try:
            accelerator.init_trackers("second", config={"lr": 0.2})
        except ValueError as error:
            return Observation(calls=recorder.calls, extra={"stopped": error})
        accelerator.log({"loss": 0.5}, step=1)
        return Observation(calls=recorder.calls, extra={"stopped": None})

    peer, ours, _ = both(script, tmp_path)
    assert peer.calls[-2:] == ["log {'loss': 0.5} 1"] * 2  # Accelerate: the one tracker twice over
    assert_refused(ours.extra["stopped"], ["init_trackers('second')", "started already"],
                   ["once per Accelerator", "new Accelerator"])
    assert ours.calls == ["config {'lr': 0.1}", "finish"]


@idiom("Accelerator(log_with='tensorboard' or 'all') where the tensorboard package is installed but fails on import",
       "refused", "Accelerate stops in init_trackers with the package's own error; braeburn refuses at Accelerator(...), "
       "naming TensorBoard, that error and the way out (reinstall it, or name the other trackers)")
def _tensorboard_broken_install(tmp_path):
    import sys

    import torch
    from accelerate import tracking

    import braeburn

    package = tmp_path / "site" / "tensorboard"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('this tensorboard is broken')\n")
    (tmp_path / "site" / "tensorboard-2.20.0.dist-info").mkdir()  # its metadata, which Accelerate looks for
    (tmp_path / "site" / "tensorboard-2.20.0.dist-info" / "METADATA").write_text("Name: tensorboard\nVersion: 2.20.0\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(tmp_path / "site"))
        for name in [n for n in sys.modules if n.startswith(("tensorboard", "torch.utils.tensorboard"))]:
            patch.delitem(sys.modules, name)
        patch.delattr(torch.utils, "tensorboard", raising=False)  # (from torch.utils import tensorboard reads it)
        found = tracking.get_available_trackers()  # (Accelerate lists what is installed when it is imported)
        if tracking.LoggerType.TENSORBOARD not in found:
            patch.setattr(tracking, "_available_trackers", [*found, tracking.LoggerType.TENSORBOARD])
        for log_with in ("tensorboard", "all"):
            reset_accelerate()
            accelerator = library_of("accelerate").Accelerator(log_with=log_with, project_dir=str(tmp_path / "peer"))
            with pytest.raises(RuntimeError, match="this tensorboard is broken"):
                accelerator.init_trackers("run")
            reset_accelerate()
            with pytest.raises(ImportError) as refused:
                braeburn.Accelerator(log_with=log_with, project_dir=str(tmp_path / "ours"))
            assert_refused(refused.value, ["log_with", "TensorBoard", "RuntimeError: this tensorboard is broken"],
                           ["pip install --force-reinstall tensorboard", "'none'"])
        reset_accelerate()


@idiom("a GeneralTracker subclass (accelerate.tracking) in log_with + get_tracker(name, unwrap=...)", "identical",
       "the same calls, in order, with the same values")
def _custom_tracker(tmp_path):
    def script(lib, folder):
        recorder = _recorder()
        accelerator = lib.Accelerator(log_with=[recorder])
        accelerator.init_trackers("run", config={"lr": 0.1})
        accelerator.log({"loss": 0.5}, step=1)
        same = [accelerator.get_tracker("recorder") is recorder,
                accelerator.get_tracker("recorder", unwrap=True) is recorder.calls]
        accelerator.end_training()
        return Observation(calls=recorder.calls, extra={"get_tracker": same})

    _identical(script, tmp_path)


# (last: the parameters are the idioms registered above)
@pytest.mark.parametrize("case", CATALOGUE.params())
def test_idiom(case, tmp_path):
    case.run(tmp_path)
