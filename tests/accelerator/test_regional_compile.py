"""Regional compilation: each repeated block and the loss compiled as regions, in place, the numbers unchanged, and
undone when the compiled steps measure slower (torch.compile's "eager" backend: Dynamo traces, nothing is built)."""

from __future__ import annotations

import pytest
import torch

from braeburn.accelerator.compile import compile_regions, repeated_blocks, uncompile_regions
from braeburn.plan.compile_policy import CompileDecision


def _gpt2():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=128, n_positions=32, bos_token_id=0,
                                     eos_token_id=0, resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)
    torch.manual_seed(0)
    model, reference = transformers.GPT2LMHeadModel(config), transformers.GPT2LMHeadModel(config)
    reference.load_state_dict(model.state_dict())
    return model, reference


def test_the_repeated_blocks_are_the_transformer_layers():
    model, _ = _gpt2()
    assert repeated_blocks(model) == list(model.transformer.h)
    assert repeated_blocks(torch.nn.Sequential(torch.nn.Linear(2, 2))) == []


def test_a_model_without_repeated_blocks_compiles_no_region():
    assert compile_regions(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU()), backend="eager") == 0


@pytest.mark.slow  # 10 s with two CPU burners on 2 cores (benchmarks/test_time.sh)
def test_a_regional_decision_compiles_the_blocks_and_the_loss_with_the_same_losses_and_can_be_undone():
    from braeburn import Accelerator

    model, reference = _gpt2()
    accelerator = Accelerator(cpu=True, compile=False, compile_backend="eager")
    prepared = accelerator.prepare(model)
    prepared = accelerator.compile_model(prepared, CompileDecision(True, "by regions", regional=True))
    assert all(block._compiled_call_impl is not None for block in model.transformer.h)
    assert hasattr(model.loss_function, "_torchdynamo_orig_callable")  # the loss, a region of its own
    ids = torch.randint(0, 128, (4, 16))
    for _ in range(2):
        loss = prepared(input_ids=ids, labels=ids).loss
        loss.backward()
    stats = accelerator.compile_stats()
    assert stats.compiled and stats.regional and stats.compiled_calls == 2 and stats.as_dict()["regional"]
    torch.testing.assert_close(loss, reference(input_ids=ids, labels=ids).loss)
    accelerator.uncompile_model(prepared)
    assert all(block._compiled_call_impl is None for block in model.transformer.h)
    assert not hasattr(model.loss_function, "_torchdynamo_orig_callable")
    torch.testing.assert_close(prepared(input_ids=ids, labels=ids).loss, loss)


def test_uncompiling_a_model_never_compiled_by_regions_changes_nothing():
    model, _ = _gpt2()
    blocks = list(model.transformer.h)
    uncompile_regions(model)
    assert list(model.transformer.h) == blocks and all(block._compiled_call_impl is None for block in blocks)
    assert "_loss_function" not in vars(model)


@pytest.mark.usefixtures("no_launcher_env", "one_thread")
def test_the_trainer_compiles_by_regions_when_asked(tmp_path, capsys):
    """compile="regional" through the Trainer: the blocks and the loss compiled, the rest eager, and the summary
    and the metrics log say so."""
    import json

    from braeburn import Trainer, TrainingConfig

    torch._dynamo.reset()
    model, _ = _gpt2()
    ids = torch.randint(0, 128, (48, 16), generator=torch.Generator().manual_seed(0))
    data = [{"input_ids": row, "labels": row} for row in ids]
    config = TrainingConfig(output_dir=str(tmp_path / "out"), use_cpu=True, compile="regional",
                            torch_compile_backend="eager", per_device_train_batch_size=4, max_steps=8,
                            save_strategy="no", logging_steps=4)
    trainer = Trainer(model, config, train_dataset=data)
    trainer.train()
    stats = trainer.accelerator.compile_stats()
    assert stats.compiled and stats.regional and stats.compiled_calls > 0
    assert stats.reason == "compile=regional, as asked"
    # two regions (the blocks, one graph for both, and the loss): two graphs, and no recompilation (it said 1)
    assert (stats.regions, stats.graphs, stats.recompiles) == (2, 2, 0)
    printed = capsys.readouterr().out
    assert "2 graph(s), 0 recompilation(s)" in printed and "eager call(s)" not in printed
    assert "call(s) outside the compiled training path (short batches, evaluation: their blocks still run" in printed
    assert all(block._compiled_call_impl is not None for block in model.transformer.h)
    records = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    run = next(record["run"] for record in reversed(records) if "run" in record)
    assert run["compile"]["regional"] is True
    torch._dynamo.reset()


@pytest.mark.usefixtures("no_launcher_env", "one_thread")
def test_regional_asked_of_a_model_without_repeated_blocks_says_it_compiled_whole(tmp_path, capsys):
    """A plain MLP has no repeated blocks: compile="regional" compiles it whole, and the line at the compile, the
    summary and the key its step times are kept under (braeburn.plan.compile_gains) say so: they said
    "compile=regional, as asked", and named the regions' key."""
    from braeburn.trainer.config import CoreTrainingConfig
    from braeburn.trainer.loop import CoreTrainer

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    data = torch.utils.data.TensorDataset(torch.randn(160, 16), torch.randn(160, 1))
    config = CoreTrainingConfig(output_dir=str(tmp_path / "out"), use_cpu=True, compile="regional",
                                torch_compile_backend="eager", per_device_train_batch_size=8, max_steps=20,
                                save_strategy="no", disable_tqdm=True)
    trainer = CoreTrainer(model, config, train_dataset=data, loss_fn=torch.nn.functional.mse_loss)
    trainer.train()
    printed = capsys.readouterr().out
    stats = trainer.accelerator.compile_stats()
    assert stats.compiled and not stats.regional and "no repeated blocks: compiled whole" in stats.reason
    assert "compile on at step" in printed and printed.count("(no repeated blocks: compiled whole)") == 2
    assert not trainer._compile_window.decision.regional
    assert not trainer._compile_window._key(trainer._prepared_model).endswith("|regions")  # the whole model's key
    torch._dynamo.reset()


def test_regional_over_several_processes_says_it_compiled_whole_over_the_wrapper():
    """With several processes the Accelerator compiles the DDP wrapper whole (Dynamo's DDP optimizer splits the graph
    at the buckets); a regional decision says so instead of "compile=regional, as asked" alone."""
    from braeburn import Accelerator

    model, _ = _gpt2()
    accelerator = Accelerator(cpu=True, compile=False, compile_backend="eager")
    prepared = accelerator.prepare(model)
    accelerator.num_processes = 2  # what a launched job's rank sees; the compile path is all that reads it here
    compiled = accelerator.compile_model(prepared, CompileDecision(True, "compile=regional, as asked", regional=True))
    stats = accelerator.compile_stats(compiled)
    assert stats.over_wrapper and not stats.regional
    assert stats.reason == "compile=regional, as asked (several processes: compiled whole, over the wrapper)"
    assert all(block._compiled_call_impl is None for block in model.transformer.h)
    torch._dynamo.reset()
