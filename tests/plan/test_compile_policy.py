"""compile="auto" compiles only where it pays; once compiled, braeburn's own steps never recompile."""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils.data import Dataset

from braeburn.plan import compile_gains
from braeburn.plan.compile_policy import MIN_EAGER_SECONDS, decide
from braeburn.devices.cpu import CpuDevice
from braeburn.trainer import TrainingConfig
from braeburn.trainer.loop import Trainer

AUTO = dict(requested="auto", device_compiles=True, device_reason="compiles here", convolutional=False,
            num_processes=1)


@pytest.mark.parametrize("overrides, compiles, words", [
    (dict(requested=True), True, "as asked"),
    (dict(requested=False), False, "as asked"),
    (dict(device_compiles=False, device_reason="off on cpu"), False, "off on cpu"),
    (dict(convolutional=True), False, "CNN"),
    (dict(num_processes=2), False, "several processes"),
    ({}, False, "not known"),
    (dict(remaining_steps=332, eager_step_seconds=0.027), False, "short of the 2x margin"),  # MRPC on an H100
    (dict(remaining_steps=20000, eager_step_seconds=0.1), True, "at least 2x: compiling"),  # a 33-minute run
])
def test_decide_table(overrides, compiles, words):
    decision = decide(**{**AUTO, **overrides})
    assert decision.compile is compiles
    assert words in decision.reason


def test_decide_threshold_and_dynamic_shapes():
    just_below = decide(**AUTO, remaining_steps=1000, eager_step_seconds=MIN_EAGER_SECONDS / 1000 * 0.99)
    just_above = decide(**AUTO, remaining_steps=1000, eager_step_seconds=MIN_EAGER_SECONDS / 1000 * 1.01,
                        shapes_vary=True)
    assert not just_below.compile and just_above.compile
    assert just_above.dynamic is True
    assert decide(**AUTO, remaining_steps=10**6, eager_step_seconds=1.0).dynamic is None


class TinyText(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(50, 16)
        self.head = torch.nn.Linear(16, 2)

    def forward(self, input_ids, attention_mask, labels=None):
        hidden = self.embed(input_ids) * attention_mask.unsqueeze(-1)
        logits = self.head(hidden.sum(1) / attention_mask.sum(1, keepdim=True))
        return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}


class VariableText(Dataset):
    """Sequences of 5..59 tokens: many lengths, as real text has."""

    def __init__(self, count: int, seed: int = 0):
        generator = torch.Generator().manual_seed(seed)
        lengths = torch.randint(5, 60, (count,), generator=generator).tolist()
        self.items = [(torch.randint(1, 50, (n,), generator=generator), i % 2) for i, n in enumerate(lengths)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]


def pad_longest(items):
    length = max(len(ids) for ids, _ in items)
    ids = torch.zeros(len(items), length, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, (tokens, _) in enumerate(items):
        ids[row, :len(tokens)], mask[row, :len(tokens)] = tokens, 1
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([label for _, label in items])}


def train_tiny(tmp_path, **overrides):
    config = TrainingConfig(output_dir=str(tmp_path / "out"), use_cpu=True, torch_compile_backend="eager",
                            num_train_epochs=3, per_device_train_batch_size=8, eval_strategy="epoch",
                            save_strategy="epoch", logging_steps=5, **overrides)
    model = TinyText()
    trainer = Trainer(model, config, train_dataset=VariableText(70), eval_dataset=VariableText(20, seed=1),
                      collate_fn=pad_longest)
    trainer.train()
    return trainer, model


@pytest.fixture
def fresh_dynamo():
    """Dynamo keeps compiled code per code object for the whole process: a test that counts graphs starts from
    none, and leaves none behind for the next one."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.usefixtures("no_launcher_env", "one_thread", "fresh_dynamo")
def test_no_recompilation_from_short_batches_saves_evaluation_or_new_lengths(tmp_path, capsys):
    """70 samples in batches of 8: a short last batch every epoch, an evaluation and a save every epoch, and
    text of many lengths. One graph is compiled, and none of that compiles another."""
    trainer, model = train_tiny(tmp_path, compile="true")
    stats = trainer.accelerator.compile_stats()
    assert stats.compiled and stats.dynamic is True  # the lengths seen before compiling varied
    assert stats.graphs == 1 and stats.recompiles == 0
    assert stats.compiled_calls > 0 and stats.eager_calls >= 3  # the short batches and evaluation ran eagerly
    assert type(trainer._prepared_model) is TinyText and trainer._prepared_model is model  # still the user's module
    summary = capsys.readouterr().out
    assert "1 graph(s), 0 recompilation(s)" in summary
    records = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    run = next(record["run"] for record in reversed(records) if "run" in record)
    assert run["compile"]["graphs"] == 1 and run["compile"]["recompiles"] == 0
    assert run["batch_shapes"] >= 2


@pytest.mark.usefixtures("no_launcher_env", "one_thread")
def test_auto_stays_eager_when_the_run_is_too_short_to_earn_a_compile(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(CpuDevice, "compile_by_default", lambda self, host: (True, "pretend the CPU compiles"))
    trainer, _ = train_tiny(tmp_path)
    stats = trainer.accelerator.compile_stats()
    assert not stats.compiled and stats.compiled_calls == 0
    assert "short of the 2x margin" in stats.reason and "ms/step eager" in stats.reason
    assert "compile    off (auto:" in capsys.readouterr().out


@pytest.mark.usefixtures("no_launcher_env", "one_thread", "fresh_dynamo")
def test_auto_compiles_when_the_measured_time_ahead_pays(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(CpuDevice, "compile_by_default", lambda self, host: (True, "pretend the CPU compiles"))
    monkeypatch.setattr(compile_gains, "DEFAULT_GAIN", compile_gains.FamilyGain(0.9, 1e-6, 1e-6))
    trainer, _ = train_tiny(tmp_path)
    stats = trainer.accelerator.compile_stats()
    assert stats.compiled and stats.decided_at_step == 13 and stats.eager_step_seconds > 0
    assert stats.recompiles == 0
    out = capsys.readouterr().out
    assert "braeburn: compile on at step 13: auto:" in out and "ms/step compiled" in out


@pytest.mark.usefixtures("no_launcher_env")
def test_accelerator_compile_true_keeps_the_module_and_runs_eval_eagerly():
    from braeburn import Accelerator

    accelerator = Accelerator(cpu=True, compile=True, compile_backend="eager")
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    prepared = accelerator.prepare(model)
    assert prepared is model  # compiled in place: the user's module, the user's type
    for size in (8, 8, 3):  # the third, short batch runs eagerly
        prepared(torch.randn(size, 4)).sum().backward()
    with torch.no_grad():
        prepared(torch.randn(8, 4))
    stats = accelerator.compile_stats()
    assert stats.compiled_calls == 2 and stats.eager_calls == 2 and stats.recompiles == 0


class BreaksItsGraph(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first, self.second = torch.nn.Linear(4, 8), torch.nn.Linear(8, 2)

    def forward(self, x):
        hidden = self.first(x).relu()
        torch._dynamo.graph_break()  # as a logging call or a .item() in a model's forward would
        return self.second(hidden)


def test_graph_breaks_are_reported_with_their_reason_and_not_counted_as_recompilations():
    from braeburn import Accelerator

    accelerator = Accelerator(cpu=True, compile=True, compile_backend="eager")
    prepared = accelerator.prepare(BreaksItsGraph())
    for _ in range(3):
        prepared(torch.randn(8, 4)).sum().backward()
    stats = accelerator.compile_stats()
    assert stats.graphs == 2 and len(stats.graph_breaks) == 1 and stats.recompiles is None
    assert "graph_break" in stats.graph_breaks[0].lower() or "graph break" in stats.graph_breaks[0].lower()
    assert stats.as_dict()["graph_breaks"] == stats.graph_breaks


@pytest.mark.slow  # torch.compile of a Transformers model (12 s)
def test_a_transformers_lm_head_model_compiles_to_one_graph_with_the_same_loss():
    """GPT2LMHeadModel's loss_function property logs on every access (its class name names no loss): a graph
    break in every forward, unless braeburn pins the loss function before compiling."""
    transformers = pytest.importorskip("transformers")
    from braeburn import Accelerator
    from transformers.loss.loss_utils import LOSS_MAPPING

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=128, n_positions=32,
                                     bos_token_id=0, eos_token_id=0, resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)
    model, reference = transformers.GPT2LMHeadModel(config), transformers.GPT2LMHeadModel(config)
    reference.load_state_dict(model.state_dict())
    accelerator = Accelerator(cpu=True, compile=True, compile_backend="eager")
    prepared = accelerator.prepare(model)
    ids = torch.randint(0, 128, (4, 16))
    losses = [prepared(input_ids=ids, labels=ids).loss for _ in range(2)]
    stats = accelerator.compile_stats()
    assert stats.graphs == 1 and stats.graph_breaks == [] and stats.recompiles == 0
    assert model.loss_function is LOSS_MAPPING["ForCausalLM"]  # the function Transformers itself would use
    torch.testing.assert_close(losses[-1], reference(input_ids=ids, labels=ids).loss)


def test_the_compile_time_reported_is_the_whole_first_compiled_step():
    """The prepared forward times the compiled forward; the backward compiles on its first call, inside the same
    step, so the window replaces that with the whole first compiled step's wall time."""
    import time
    from types import SimpleNamespace

    from braeburn.plan.compile_policy import CompileDecision, CompileStats
    from braeburn.trainer.compile_window import CompileWindow

    stats = CompileStats(compile_seconds=0.01)
    accelerator = SimpleNamespace(
        compile_stats=lambda model: stats, print=lambda *a, **k: None, compile_model=lambda model, d: model,
        compile_decision=lambda model, **k: CompileDecision(True, "compile=true, as asked"),
        compile_key=lambda model, batch_size: "model", is_main_process=True,
        plan=SimpleNamespace(device=SimpleNamespace(synchronize=lambda: None)))
    window = CompileWindow(accelerator)
    window.begin("model", step=0, max_steps=100)
    for step in range(1, window._decide_at + 1):
        window.after_step(step, "model", {(("x", (8, 4)),)})
    stats.compiled_calls = 1
    time.sleep(0.2)  # the first compiled step: forward, backward (compiled now), optimizer
    window.after_step(window._decide_at + 1, "model", {(("x", (8, 4)),)})
    assert stats.compile_seconds >= 0.2


def test_lengths_vary_reads_batches_with_a_zero_dimensional_tensor():
    from braeburn.data.collate import batch_signature
    from braeburn.trainer.compile_window import _lengths_vary

    def batch(size, length):
        return batch_signature((torch.zeros(size, length), torch.tensor(1.0)))  # a 0-d tensor: shape ()

    assert not _lengths_vary({batch(8, 4), batch(3, 4)}) and _lengths_vary({batch(8, 4), batch(8, 5)})


def test_a_base_model_inside_a_transformers_model_is_not_pinned_so_no_false_loss_warning():
    """BertModel inside BertForSequenceClassification never looks its loss up; pinning it would make Transformers
    print "Using the default loss: ForCausalLMLoss" for a classifier (seen on an H100 run of BERT-base)."""
    transformers = pytest.importorskip("transformers")
    from braeburn.plan.compile_policy import pin_traced_attributes

    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=64, num_labels=2)
    model = transformers.BertForSequenceClassification(config)
    pin_traced_attributes(model)
    pinned = [type(module).__name__ for module in model.modules() if "_loss_function" in vars(module)]
    assert pinned == ["BertForSequenceClassification"]
    assert "_loss_function" not in vars(model.bert)



@pytest.mark.usefixtures("no_launcher_env", "one_thread", "fresh_dynamo")
def test_auto_before_its_decision_does_what_compile_true_does_and_nothing_before_step_1(tmp_path, monkeypatch):
    """Where the device compiles by default (a GPU), compile="auto" reaches its first step as compile=false does: no
    device sync, no read of the compile records. Up to its decision it does what compile=true does on a run this
    long: one sync on each of steps 3-13 (the eager steps it times); then it reads the records once, at step 13."""
    from braeburn.trainer.callbacks import Callback

    monkeypatch.setattr(CpuDevice, "compile_by_default", lambda self, host: (True, "pretend the CPU compiles"))
    events: list[str] = []
    monkeypatch.setattr(CpuDevice, "synchronize", lambda self: events.append("sync"))
    read_records = compile_gains.read_records
    monkeypatch.setattr(compile_gains, "read_records",
                        lambda *args, **kwargs: events.append("records") or read_records(*args, **kwargs))

    class Steps(Callback):
        def on_train_begin(self, trainer, state):
            events.append("begin")

        def on_step_end(self, trainer, state):
            events.append(f"step {state.global_step}")

    def run(compile_value: str) -> dict[str, list[str]]:
        """What each phase did: "setup" (the Trainer's construction and train()'s setup) and each step (its own
        work, and the compile window's after it)."""
        events.clear()
        config = TrainingConfig(output_dir=str(tmp_path / compile_value), use_cpu=True, compile=compile_value,
                                torch_compile_backend="eager", max_steps=30, per_device_train_batch_size=8,
                                save_strategy="no", logging_steps=100, disable_tqdm=True)
        Trainer(TinyText(), config, train_dataset=VariableText(240), collate_fn=pad_longest,
                callbacks=[Steps()]).train()
        phases, pending = {}, []
        for event in events:
            if event in ("begin",) or event.startswith("step "):
                phases["setup" if event == "begin" else event], pending = pending, []
            else:
                pending.append(event)
        return phases

    auto, eager, compiled = run("auto"), run("false"), run("true")
    first = ["setup", "step 1", "step 2"]
    assert [auto[p] for p in first] == [eager[p] for p in first] == [compiled[p] for p in first] == [[], [], []]
    assert all(auto[f"step {n}"] == compiled[f"step {n}"] == ["sync"] for n in range(3, 13))
    assert all(eager[f"step {n}"] == [] for n in range(1, 31))
    assert auto["step 13"] == ["sync", "records"]  # the last timed step, then the decision: stays eager here
    assert all(auto[f"step {n}"] == [] for n in range(14, 31))
    assert compiled["step 13"][0] == "sync" and "records" in compiled["step 13"]  # timed, then compiled
