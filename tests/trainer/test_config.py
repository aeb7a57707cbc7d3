"""TrainingConfig and the parser: flags, config files, help, and every error at once."""

from __future__ import annotations

import dataclasses
import textwrap
from dataclasses import dataclass, field

import pytest

from braeburn import TrainingConfig
from braeburn.trainer.config import ConfigError, parse_config
from braeburn.compat.transformers.arguments import is_unsupported


@dataclass
class ExampleArguments:
    data_dir: str | None = None
    """Folder with the data."""
    model_name_or_path: str = "tiny"
    task_name: str = field(default="mrpc", metadata={"help": "GLUE task name"})
    max_seq_length: int = 128
    """Longest tokenized input."""


# The CLI surface: adding, removing or renaming a flag must be a conscious change (and a docs change).
FROZEN_FLAGS = [
    "output_dir", "overwrite_output_dir", "do_train", "do_eval", "do_predict", "per_device_train_batch_size",
    "per_device_eval_batch_size", "gradient_accumulation_steps", "learning_rate", "weight_decay", "adam_beta1",
    "adam_beta2", "adam_epsilon", "max_grad_norm", "num_train_epochs", "max_steps", "lr_scheduler_type",
    "warmup_steps", "warmup_ratio", "logging_steps", "eval_strategy", "eval_steps", "save_strategy", "save_steps",
    "save_in_background", "save_total_limit", "metric_for_best_model", "greater_is_better", "seed",
    "full_determinism", "mixed_precision", "use_cpu", "accelerator", "devices", "compile", "torch_compile_backend",
    "torch_compile_mode", "pad_to_buckets", "step_breakdown", "strategy", "fsdp_units", "freeze_heap",
    "resume_from_checkpoint", "nan_policy",
    "auto_find_batch_size", "dataloader_num_workers", "dataloader_drop_last", "bf16", "fp16", "torch_compile",
    "use_mps_device", "fsdp", "tf32", "gradient_checkpointing", "gradient_checkpointing_kwargs",
    "activation_checkpointing", "activation_checkpointing_kwargs", "label_smoothing_factor", "optim", "optim_args",
    "lr_scheduler_kwargs", "average_tokens_across_devices", "logging_strategy", "logging_first_step", "logging_dir",
    "log_level", "log_level_replica", "verbose", "disable_tqdm", "report_to", "run_name", "project", "prediction_loss_only",
    "eval_on_start", "eval_accumulation_steps", "load_best_model_at_end", "data_seed",
    "dataloader_persistent_workers", "dataloader_prefetch_factor", "dataloader_multiprocessing_context",
    "remove_unused_columns", "label_names", "torch_empty_cache_steps", "local_rank", "train_sampling_strategy",
    "dataloader_pin_memory",
]
# Transformers' TrainingArguments fields braeburn parses only to refuse them with what to use instead.
REFUSED_FLAGS = [
    "deepspeed", "fsdp_config", "accelerator_config", "parallelism_config", "push_to_hub", "hub_token",
    "hub_private_repo", "hub_model_id", "hub_strategy", "hub_always_push", "hub_revision", "use_liger_kernel",
    "liger_kernel_config", "neftune_noise_alpha", "optim_target_modules", "bf16_full_eval", "fp16_full_eval",
    "use_cache", "include_num_input_tokens_seen", "log_on_each_node", "logging_nan_inf_filter", "trackio_space_id",
    "trackio_bucket_id", "trackio_static_space_id", "eval_delay", "eval_do_concat_batches",
    "eval_use_gather_object", "include_for_metrics", "batch_eval_metrics", "save_only_model", "save_on_each_node",
    "enable_jit_checkpoint", "ignore_data_skip", "restore_callback_states_from_checkpoint",
    "dataloader_in_order", "length_column_name", "group_by_length",
    "ddp_find_unused_parameters", "ddp_bucket_cap_mb", "ddp_broadcast_buffers", "ddp_static_graph", "ddp_backend",
    "ddp_timeout", "debug", "skip_memory_metrics", "evaluation_strategy", "no_cuda", "save_safetensors",
    "include_inputs_for_metrics", "half_precision_backend", "fp16_opt_level", "tpu_num_cores", "past_index",
    "jit_mode_eval", "use_ipex", "split_batches", "dispatch_batches",
]


def parse(*argv, types=(ExampleArguments, TrainingConfig)):
    return parse_config(*types, argv=list(argv), exit_on_error=False)


def test_cli_surface_is_frozen():
    fields = dataclasses.fields(TrainingConfig)
    assert [f.name for f in fields if not is_unsupported(f)] == FROZEN_FLAGS
    assert [f.name for f in fields if is_unsupported(f)] == REFUSED_FLAGS


def test_defaults():
    (config,) = parse(types=(TrainingConfig,))
    assert (config.output_dir, config.per_device_train_batch_size, config.learning_rate) == ("outputs", 8, 5e-5)
    assert (config.num_train_epochs, config.max_steps, config.logging_steps) == (3, -1, 50)
    assert (config.eval_strategy, config.save_strategy, config.save_total_limit, config.seed) == ("no", "epoch", None, 42)
    assert (config.mixed_precision, config.use_cpu, config.accelerator, config.devices, config.compile) == \
        ("auto", False, "auto", "auto", "auto")
    assert config.resume_from_checkpoint is None and config.nan_policy == "stop"


def test_run_glue_spelling_dashes_booleans_and_cpu_alias():
    example, config = parse("--model_name_or_path", "bert", "--task_name", "rte", "--do_train", "--do_eval", "false",
                            "--max_seq_length", "64", "--per_device_train_batch_size", "32", "--learning-rate",
                            "2e-5", "--num_train_epochs", "3", "--output_dir", "/tmp/mrpc/", "--overwrite_output_dir",
                            "--cpu", "--devices", "1", "--save_total_limit", "none", "--compile", "false")
    assert (example.model_name_or_path, example.task_name, example.max_seq_length) == ("bert", "rte", 64)
    assert config.do_train is True and config.do_eval is False and config.overwrite_output_dir is True
    assert config.learning_rate == 2e-5 and config.per_device_train_batch_size == 32
    assert config.use_cpu is True and config.devices == 1 and config.save_total_limit is None
    assert config.compile == "false"
    (config,) = parse("--do_train", "--no_do_train", "--no-use-cpu", types=(TrainingConfig,))
    assert config.do_train is False and config.use_cpu is False


def test_help_comes_from_field_docstrings_and_metadata(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse("--help")
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "Peak learning rate of the default AdamW optimizer. (default: 5e-05)" in text
    assert "Folder with the data." in text and "GLUE task name" in text
    assert "--cpu" in text and "--learning-rate" in text and "--config FILE" in text


@pytest.mark.parametrize("suffix,body", [
    (".toml", """
        learning_rate = 0.001
        per_device_train_batch_size = 16
        task_name = "sst2"
        do_train = true
        """),
    (".yaml", """
        learning_rate: 0.001
        per_device_train_batch_size: 16
        task_name: sst2
        do_train: yes
        """),
])
def test_config_file_with_command_line_override(tmp_path, suffix, body):
    path = tmp_path / f"run{suffix}"
    path.write_text(textwrap.dedent(body))
    example, config = parse("--config", str(path), "--per_device_train_batch_size", "4")
    assert config.learning_rate == 1e-3 and config.do_train is True and example.task_name == "sst2"
    assert config.per_device_train_batch_size == 4  # the command line wins


def test_every_error_reported_at_once(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("learning_rat: 0.1\nwarmup_ratio: 2\n")
    with pytest.raises(ConfigError) as error:
        parse("--config", str(path), "--per_device_train_batch_size", "-3", "--num_train_epochs", "three",
              "--lr_scheduler_type", "step", "--mixed_precision", "fp8", "--max_seq_length", "x", "--bogus", "1")
    text = str(error.value)
    assert text.startswith("8 problems in the configuration")
    for expected in [
        "per_device_train_batch_size=-3: must be >= 1",
        "num_train_epochs='three': expected a number",
        "lr_scheduler_type='step': choose one of linear, cosine, cosine_with_restarts, constant",
        "mixed_precision='fp8': choose one of auto, no, fp16, bf16",  # the plan's rule, not repeated here
        "max_seq_length='x': expected a whole number (on the command line)",
        "unknown option='--bogus': on the command line",
        f"unknown option='learning_rat': in {path}; did you mean --learning_rate?",
        "warmup_ratio=2.0: must be in [0, 1)",
    ]:
        assert expected in text, expected
    assert len(error.value.errors) == 8


def test_device_rules_come_from_the_plan(fake_host):
    fake_host("linux_cpu")
    with pytest.raises(ConfigError, match="accelerator='mps': MPS is not available"):
        parse("--accelerator", "mps")
    fake_host("apple")
    (_, config) = parse("--accelerator", "mps")
    assert config.accelerator == "mps"


def test_errors_exit_with_status_2_for_scripts(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_config(TrainingConfig, argv=["--logging_steps", "0"])
    assert exit_info.value.code == 2
    assert "logging_steps=0: must be >= 1" in capsys.readouterr().err


def test_required_field_and_validate():
    @dataclass
    class Needs:
        data_dir: str

    with pytest.raises(ConfigError, match="data_dir=None: is required; pass --data_dir VALUE"):
        parse(types=(Needs,))
    errors = TrainingConfig(save_total_limit=0, eval_steps=0, nan_policy="ignore", max_steps=0).validate()
    assert {e.option for e in errors} == {"save_total_limit", "eval_steps", "nan_policy", "max_steps"}


def test_output_dir_that_is_a_file(tmp_path):
    file = tmp_path / "f"
    file.write_text("x")
    assert [e.option for e in TrainingConfig(output_dir=str(file)).validate()] == ["output_dir"]


def test_config_file_is_data_only(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text("learning_rate: !!python/object/apply:os.system ['echo hacked']\n")
    with pytest.raises(ConfigError, match="cannot be read"):
        parse("--config", str(path))


def test_infinite_and_huge_numbers_are_refused_all_at_once():
    with pytest.raises(ConfigError) as caught:
        parse("--num_train_epochs", "inf", "--learning_rate", "inf", "--seed", str(2**64), "--warmup_ratio", "nan",
              "--save_steps", str(2**70), "--dataloader_num_workers", "100000", "--lr_scheduler_type", "x",
              "--cpu", types=(TrainingConfig,))
    by_option = {e.option: e.message for e in caught.value.errors}
    assert set(by_option) == {"num_train_epochs", "learning_rate", "seed", "warmup_ratio", "save_steps",
                              "dataloader_num_workers", "lr_scheduler_type"}  # each once, all at once
    assert "finite" in by_option["learning_rate"] and "finite" in by_option["num_train_epochs"]
    assert "torch's seed range" in by_option["seed"] and "64-bit" in by_option["save_steps"]
    errors = TrainingConfig(num_train_epochs=1e308, max_steps=-1).validate()
    assert [e.option for e in errors] == ["num_train_epochs"] and "--max_steps" in errors[0].message
    assert not TrainingConfig(seed=2**64 - 1, num_train_epochs=1000.0).validate()
    assert not TrainingConfig(seed=-(2**63)).validate()


def test_field_metadata_is_argparse_keywords_only():
    """Transformers' HfArgumentParser passes a field's metadata to add_argument as keywords, unchanged."""
    import argparse

    parser = argparse.ArgumentParser()
    for spec in dataclasses.fields(TrainingConfig):
        kwargs = dict(spec.metadata)
        aliases = kwargs.pop("aliases", ())
        parser.add_argument(f"--{spec.name}", *aliases, **kwargs)  # raises TypeError on a foreign key


def test_refused_field_is_hidden_but_still_refused_with_its_reason(capsys):
    with pytest.raises(SystemExit):
        parse_config(TrainingConfig, argv=["--help"])
    assert "--deepspeed" not in capsys.readouterr().out
    with pytest.raises(ConfigError, match="deepspeed='ds.json': is a Transformers option braeburn does not "
                       "support: braeburn has no DeepSpeed"):
        parse("--deepspeed", "ds.json")


def test_devices_given_as_text_is_a_count():
    assert TrainingConfig(devices="2").devices == 2
    assert TrainingConfig(devices=None).devices == "auto"
    (config,) = parse("--devices", "1", types=(TrainingConfig,))
    assert config.devices == 1
