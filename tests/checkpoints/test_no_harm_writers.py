"""No write follows a link out of the output folder, whoever performs it: braeburn, Transformers' ``save_pretrained``,
a tokenizer's ``save_pretrained``, the examples' own result files.

Links are planted, as in a shared scratch folder or a folder made by linking a base model's files, at every name the
documented text-example command writes; each points to a file outside the run. The example then runs in small (a
1-layer BERT built from a config, with a vocabulary of the training words: no download) with
``--overwrite_output_dir``, and again on resume: a link is not braeburn's, so each run is refused in one line before
anything is written, and every file outside keeps its bytes (a listing with hashes before and after). A link planted
while a run goes on refuses save_model()'s move of the files Transformers' writers wrote into a staging folder.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from braeburn.checkpoints import no_follow
from braeburn.checkpoints.ownership import ForeignFileError
from braeburn.trainer.metrics_log import METRICS_FILE
from tests.examples.test_examples import write_glue_mrpc

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))

import _metrics  # noqa: E402
import text_classification  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread", "no_launcher_env")

# What the text example writes in output_dir (save_model: save_pretrained, the tokenizer, training_args.bin; the
# example's eval_results.json; the Trainer's log), and what Transformers' writers may write there besides.
WRITTEN = ["config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json",
           "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt", "chat_template.jinja",
           "training_args.bin", "eval_results.json", "trainer_state.json", "all_results.json", "README.md"]
STAGING = [".checkpoint-4.tmp", "..checkpoint-4.tmp.partial"]  # the staging folders of the checkpoint it writes


def listing(folder: Path) -> dict[str, str]:
    """Every file below ``folder`` with the sha256 of its bytes."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def plant_links(out: Path, outside: Path) -> dict[str, Path]:
    """A link at each name the run writes, to a file (or, for the staging folder, a folder) outside it."""
    outside.mkdir(exist_ok=True)
    links = {}
    for name in [*WRITTEN, METRICS_FILE]:
        target = outside / f"{name}.precious"
        target.write_text(f"someone's {name}, not the run's\n")
        no_follow.remove_file(out / name)
        (out / name).symlink_to(target)
        links[name] = target
    for i, name in enumerate(STAGING):
        (outside / f"folder{i}").mkdir(exist_ok=True)
        (outside / f"folder{i}" / "keep.txt").write_text("kept\n")
        (out / name).symlink_to(outside / f"folder{i}", target_is_directory=True)
    return links


def run_example(data: Path, out: Path, *extra: str) -> dict:
    return text_classification.main(["--task_name", "mrpc", "--data_dir", str(data), "--max_seq_length", "32",
                                     "--cpu", "--do_train", "--do_eval", "--hidden_size", "32",
                                     "--num_hidden_layers", "1", "--per_device_train_batch_size", "8",
                                     "--save_steps", "2", "--output_dir", str(out), *extra])


def assert_refused(error: pytest.ExceptionInfo, out: Path, outside: Path, before: dict[str, str]) -> None:
    """One line naming a planted name as not braeburn's; nothing outside changed, nothing written through a link."""
    message = str(error.value)
    assert "\n" not in message and "not braeburn's" in message and "symbolic link" in message
    assert listing(outside) == before  # nothing outside the run changed, nor was added
    assert not list(out.glob(".braeburn-write-*")) and not (out / ".braeburn-staging").exists()


def test_the_text_example_with_overwrite_output_dir_is_refused_before_writing_through_a_planted_link(tmp_path):
    """A link at a name the run writes is not braeburn's: --overwrite_output_dir trains over braeburn's own files
    only, so the run is refused before anything is written (Transformers' writers would follow the link)."""
    data, out, outside = write_glue_mrpc(tmp_path / "MRPC"), tmp_path / "out", tmp_path / "outside"
    out.mkdir()
    plant_links(out, outside)
    before = listing(outside)
    with pytest.raises(ForeignFileError) as error:
        run_example(data, out, "--overwrite_output_dir", "--max_steps", "4")
    assert_refused(error, out, outside, before)


def test_the_text_example_on_resume_is_refused_when_its_files_were_replaced_by_links(tmp_path):
    data, out, outside = write_glue_mrpc(tmp_path / "MRPC"), tmp_path / "out", tmp_path / "outside"
    run_example(data, out, "--max_steps", "2")
    plant_links(out, outside)
    before = listing(outside)
    with pytest.raises(ForeignFileError) as error:
        run_example(data, out, "--max_steps", "4", "--resume_from_checkpoint", "latest")
    assert_refused(error, out, outside, before)


def test_save_model_never_writes_through_a_link_planted_after_the_run_began(tmp_path):
    """Transformers' writers follow links: save_model() has them write into a staging folder, and a link planted at
    one of its names meanwhile refuses the move, before any file is moved. Nothing outside changes."""
    from transformers import BertConfig, BertForSequenceClassification

    from braeburn import Trainer, TrainingConfig

    out, outside = tmp_path / "out", tmp_path / "outside"
    model = BertForSequenceClassification(BertConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1,
                                                     num_attention_heads=2, intermediate_size=16))
    trainer = Trainer(model, TrainingConfig(output_dir=str(out), use_cpu=True, report_to=[]))
    trainer.save_model()  # braeburn's own files now
    outside.mkdir()
    (outside / "config.json.precious").write_text("someone's config\n")
    no_follow.remove_file(out / "config.json")
    (out / "config.json").symlink_to(outside / "config.json.precious")
    before = listing(outside)
    with pytest.raises(ForeignFileError):
        trainer.save_model()
    assert listing(outside) == before
    assert (out / "config.json").is_symlink()  # left as the user made it: braeburn replaces only its own


def test_published_files_replace_links_on_their_way(tmp_path):
    """A writer's file in a sub-folder: a link standing for that sub-folder is replaced by a real folder."""
    out, outside = tmp_path / "out", tmp_path / "outside"
    (outside / "elsewhere").mkdir(parents=True)
    (outside / "elsewhere" / "vocab.txt").write_text("precious\n")
    out.mkdir()
    (out / "sub").symlink_to(outside / "elsewhere", target_is_directory=True)
    with no_follow.private_folder(out) as private:
        (private / "sub").mkdir()
        (private / "sub" / "vocab.txt").write_text("the run's\n")
        (private / "top.json").write_text("{}")
        published = no_follow.publish_files(private, out)
    assert published == [out / "top.json", out / "sub" / "vocab.txt"]
    assert (outside / "elsewhere" / "vocab.txt").read_text() == "precious\n"
    assert not (out / "sub").is_symlink() and (out / "sub" / "vocab.txt").read_text() == "the run's\n"
    assert sorted(p.name for p in out.iterdir()) == ["sub", "top.json"]  # the private folder is gone


def test_the_examples_result_files_replace_planted_links(tmp_path):
    import numpy as np

    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("eval_results.json", "confusion_matrix.png"):
        (outside / name).write_text("precious\n")
        (tmp_path / name).symlink_to(outside / name)
    _metrics.write_json({"eval_accuracy": 1.0}, tmp_path / "eval_results.json")
    _metrics.save_confusion_matrix_png(np.eye(2, dtype=int), ["a", "b"], tmp_path / "confusion_matrix.png", "t")
    assert all((outside / name).read_text() == "precious\n" for name in ("eval_results.json", "confusion_matrix.png"))
    assert (tmp_path / "confusion_matrix.png").read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / "eval_results.json").is_symlink()


class RecordingSummaryWriter:
    """Stands in for TensorBoard's SummaryWriter (not installed everywhere): records where and how it was made."""

    made: list[dict] = []

    def __init__(self, log_dir=None, **kwargs):
        self.log_dir = log_dir
        RecordingSummaryWriter.made.append({"log_dir": log_dir, **kwargs})

    def add_scalar(self, *args, **kwargs):
        pass

    def close(self):
        pass


@pytest.fixture
def fake_tensorboard(monkeypatch):
    import types

    module = types.ModuleType("torch.utils.tensorboard")
    module.SummaryWriter = RecordingSummaryWriter
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", module)
    RecordingSummaryWriter.made = []
    return RecordingSummaryWriter.made


def test_tensorboard_never_writes_through_a_link_at_its_folder_or_at_an_event_file(tmp_path, fake_tensorboard, capsys):
    from braeburn.trainer.metrics_log import MetricsLogCallback
    from braeburn.trainer.state import TrainerState

    elsewhere = tmp_path / "outside"
    elsewhere.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "tensorboard").symlink_to(elsewhere, target_is_directory=True)
    trainer = type("T", (), {"is_main_process": True, "output_dir": out})()
    logger, state = MetricsLogCallback(tensorboard=True), TrainerState()
    logger.on_train_begin(trainer, state)
    logger.on_log(trainer, state, {"loss": 1.0})
    logger.on_train_end(trainer, state)
    assert fake_tensorboard == [] and list(elsewhere.iterdir()) == []  # its folder a planted link: no writer made
    err = capsys.readouterr().err
    assert f"cannot write {out / 'tensorboard'} ({out / 'tensorboard'} is a symbolic link" in err, err
    assert "TensorBoard logging is off for this run" in err

    (out / "tensorboard").unlink()
    for _ in range(2):
        MetricsLogCallback(tensorboard=True).on_train_begin(trainer, state)
    from braeburn.accelerator.trackers import TensorBoardTracker

    TensorBoardTracker("run", tmp_path / "logs")  # the Accelerator's tracker (log_with="tensorboard") too
    suffixes = [made["filename_suffix"] for made in fake_tensorboard]
    assert len(set(suffixes)) == 3 and all(len(suffix) == 9 for suffix in suffixes)  # event files no one can foresee


class TorchSummaryWriter(RecordingSummaryWriter):
    """Stands in for torch's SummaryWriter as the Accelerator's tracker uses it: ``add_hparams`` and ``add_scalars``
    open another writer, in a folder of their own, as torch's do; every event is recorded with its writer."""

    events: list[tuple] = []

    def __init__(self, log_dir=None, **kwargs):
        super().__init__(log_dir, **kwargs)
        writer = self
        self.file_writer = type("FileWriter", (), {"add_summary": lambda _, summary, step=None: writer.event(
            "summary", summary)})()

    def event(self, *what):
        TorchSummaryWriter.events.append((self.log_dir, *what))

    def add_scalar(self, tag, value, global_step=None, **kwargs):
        self.event("scalar", tag, value)

    def add_text(self, tag, text, global_step=None, **kwargs):
        self.event("text", tag, text)

    def add_hparams(self, hparams, metric_dict, run_name=None, **kwargs):  # torch: a writer in log_dir/run_name
        TorchSummaryWriter(f"{self.log_dir}/{run_name}").event("summary", ("hparams", tuple(hparams.items())))

    def add_scalars(self, tag, values, global_step=None, **kwargs):  # torch: a writer per entry, in log_dir/tag_entry
        for entry, value in values.items():
            TorchSummaryWriter(f"{self.log_dir}/{tag}_{entry}").event("scalar", tag, value)

    def flush(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def test_the_tensorboard_tracker_writes_only_into_folders_it_made_and_files_no_one_can_foresee(tmp_path, monkeypatch):
    """Accelerator(log_with="tensorboard"): the configuration goes where Accelerate's tracker puts it, a run of its
    own in ``run/<time>/`` and ``run/<time>/hparams.yml``, but each ``<time>`` folder is made new (a link planted at
    the name the clock gives is passed over, never written through) and each event file has a random end (a dict of
    values: test_a_link_at_an_add_scalars_folder_is_not_written_through)."""
    import types

    from braeburn.accelerator import trackers
    from braeburn.accelerator.trackers import TensorBoardTracker

    module, summary = types.ModuleType("torch.utils.tensorboard"), types.ModuleType("torch.utils.tensorboard.summary")
    module.SummaryWriter, module.summary = TorchSummaryWriter, summary
    summary.hparams = lambda hparams, metrics, *a: [("hparams", tuple(hparams.items())), "start", "end"]
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", module)
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard.summary", summary)
    clock = iter([1000.5, 1001.5, 1002.5])
    monkeypatch.setattr(trackers.time, "time", lambda: next(clock))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "1000.5").symlink_to(elsewhere, target_is_directory=True)  # waiting at the clock's name
    RecordingSummaryWriter.made, TorchSummaryWriter.events = [], []
    tracker = TensorBoardTracker("run", tmp_path)
    tracker.store_init_configuration({"lr": 0.1, "layers": "[2, 3]", "warmup": None})
    tracker.log({"loss": 1.0, "note": "x"}, step=1)
    tracker.finish()
    folder, hparams_folder = str(tmp_path / "run"), str(tmp_path / "run" / "1001.5")
    assert [made["log_dir"] for made in RecordingSummaryWriter.made] == [folder, hparams_folder]
    assert all(len(made["filename_suffix"]) == 9 for made in RecordingSummaryWriter.made)
    assert TorchSummaryWriter.events == [
        (hparams_folder, "summary", ("hparams", (("lr", 0.1), ("layers", "[2, 3]"), ("warmup", None)))),
        (hparams_folder, "summary", "start"), (hparams_folder, "summary", "end"), (folder, "scalar", "loss", 1.0),
        (folder, "text", "note", "x")]
    assert (tmp_path / "run" / "1002.5" / "hparams.yml").read_text() == "layers: '[2, 3]'\nlr: 0.1\nwarmup: null\n"
    assert list(elsewhere.iterdir()) == []


def test_a_link_at_an_add_scalars_folder_is_not_written_through(tmp_path):
    """log({"loss": {"train": ..., "val": ...}}) writes Accelerate's ``run/loss_train/`` and ``run/loss_val/``; a
    link planted at one of them before is not followed: that entry is left out with one warning, nothing is
    written where the link points, the other entry is written."""
    pytest.importorskip("tensorboard")
    from braeburn.accelerator.trackers import TensorBoardTracker
    from braeburn.warn import BraeburnWarning

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "loss_val").symlink_to(elsewhere, target_is_directory=True)
    tracker = TensorBoardTracker("run", tmp_path)
    with pytest.warns(BraeburnWarning, match="loss_val is a symbolic link") as warned:
        tracker.log({"loss": {"train": 0.5, "val": 0.75}}, step=1)
        tracker.log({"loss": {"train": 0.25, "val": 0.5}}, step=2)
    tracker.finish()
    assert len(warned) == 1 and list(elsewhere.iterdir()) == []
    assert len(list((tmp_path / "run" / "loss_train").glob("events.out.tfevents.*"))) == 1


def test_tensorboard_reads_the_trackers_hyperparameters_and_grouped_values(tmp_path):
    """The same with TensorBoard itself (where installed): the values in the tracker's file, the hyperparameters in
    the run of their own, as Accelerate writes them (tests/compat/accelerate/test_catalogue_files.py compares)."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    from braeburn.accelerator.trackers import TensorBoardTracker

    tracker = TensorBoardTracker("run", tmp_path)
    tracker.store_init_configuration({"lr": 0.1, "note": "x"})
    tracker.log({"loss": 1.0, "group": {"a": 1.0, "b": 2.0}}, step=1)
    tracker.finish()
    (events,) = (tmp_path / "run").glob("events.out.tfevents.*")
    for entry, number in (("a", 1.0), ("b", 2.0)):  # add_scalars: one run per entry, the scalar tagged by the key
        (grouped,) = (tmp_path / "run" / f"group_{entry}").glob("events.out.tfevents.*")
        run = EventAccumulator(str(grouped))
        run.Reload()
        assert [(e.step, e.value) for e in run.Scalars("group")] == [(1, number)]
    (hparams_file,) = [p for p in (tmp_path / "run").glob("*/events.out.tfevents.*") if "group_" not in str(p)]
    assert [p.name for p in (tmp_path / "run").glob("*/hparams.yml")] == ["hparams.yml"]
    values = EventAccumulator(str(events))
    values.Reload()
    assert values.Tags()["scalars"] == ["loss"]
    config = EventAccumulator(str(hparams_file))
    config.Reload()
    start = config.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    hparams = plugin_data_pb2.HParamsPluginData.FromString(start).session_start_info.hparams
    assert hparams["lr"].number_value == 0.1 and hparams["note"].string_value == "x"
