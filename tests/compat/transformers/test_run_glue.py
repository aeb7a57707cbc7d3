"""run_glue's use of the Trainer (run_glue_port.py) with each library: the same files, metrics and predictions."""

from __future__ import annotations

import pytest

from . import run_glue_port

SEED_FLAGS = ["--task_name", "mrpc", "--do_train", "--do_eval", "--do_predict", "--max_seq_length", "32",
              "--per_device_train_batch_size", "8", "--learning_rate", "2e-3", "--num_train_epochs", "2",
              "--use_cpu", "--report_to", "none", "--eval_strategy", "epoch", "--save_strategy", "epoch",
              "--load_best_model_at_end", "--metric_for_best_model", "accuracy", "--logging_strategy", "epoch",
              "--optim", "adamw_torch", "--logging_first_step", "--disable_tqdm", "true", "--seed", "1"]

EXPECTED_FILES = {"all_results.json", "train_results.json", "eval_results.json", "trainer_state.json",
                  "config.json", "model.safetensors", "training_args.bin", "tokenizer_config.json",
                  "predict_results_mrpc.txt", "README.md", "checkpoint-4", "checkpoint-8"}


@pytest.mark.slow  # run_glue.py's port trained end to end under both libraries (7-22 s on a loaded machine)
def test_run_glue_port(hf_lib, tmp_path):
    argv = SEED_FLAGS + ["--output_dir", str(tmp_path / "mrpc")]
    observed = run_glue_port.main(hf_lib, argv, tmp_path)
    assert EXPECTED_FILES <= set(observed["files"]), observed["files"]
    assert {"train_runtime", "train_loss", "train_samples", "epoch"} <= set(observed["train"])
    assert {"eval_loss", "eval_accuracy", "eval_samples", "epoch"} <= set(observed["eval"])
    assert observed["predictions"] == 16


def test_seed_command_with_use_mps_device(tmp_path, monkeypatch, capsys):
    """Transformers removed --use_mps_device; braeburn accepts it with one line saying it is not needed."""
    import braeburn
    from braeburn import errors as hf_compat

    monkeypatch.setenv("BRAEBURN_DEVICE", "cpu")
    monkeypatch.setattr(hf_compat, "_noted", set())  # the note is said once per process
    argv = SEED_FLAGS[:2] + ["--output_dir", str(tmp_path / "o"), "--use_mps_device"]
    _, _, args = braeburn.HfArgumentParser((run_glue_port.ModelArguments, run_glue_port.DataTrainingArguments,
                                            braeburn.TrainingArguments)).parse_args_into_dataclasses(args=argv)
    assert args.use_mps_device is True
    assert "--use_mps_device is deprecated" in capsys.readouterr().err


def test_rerunning_a_command_into_its_own_output_dir_trains_again(hf_lib, tmp_path, capsys):
    """Transformers 5 has no --overwrite_output_dir and trains into a non-empty output_dir; a rerun of the same
    command (here without checkpoints, so run_glue has none to resume from) must not fail under braeburn either.
    braeburn keeps the first run's files in previous-run-1/ rather than writing over them: the files braeburn
    wrote, not the one the script wrote itself (predict_results_mrpc.txt, which the script writes again)."""
    import transformers

    if hf_lib.name == "transformers" and int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip("Transformers 4's run_glue refuses a non-empty output_dir without --overwrite_output_dir")
    flags = [flag for flag in SEED_FLAGS if flag not in ("--load_best_model_at_end", "--metric_for_best_model",
                                                          "accuracy")]
    flags[flags.index("--save_strategy") + 1] = "no"
    argv = flags + ["--output_dir", str(tmp_path / "mrpc")]
    first = run_glue_port.main(hf_lib, argv, tmp_path)
    second = run_glue_port.main(hf_lib, argv, tmp_path)
    assert second["eval"]["eval_accuracy"] == first["eval"]["eval_accuracy"]
    assert {"model.safetensors", "all_results.json"} <= set(second["files"])
    if hf_lib.name == "braeburn":
        kept = {p.name for p in (tmp_path / "mrpc" / "previous-run-1").iterdir()}
        assert {"model.safetensors", "all_results.json", "trainer_state.json", "README.md"} <= kept
        assert "predict_results_mrpc.txt" not in kept and "predict_results_mrpc.txt" in second["files"]
        assert "held an earlier run" in capsys.readouterr().out
