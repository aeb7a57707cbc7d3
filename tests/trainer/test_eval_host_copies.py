"""evaluate() copies predictions and labels to the host a few batches at a time, not after every batch: each copy
waits for the device, so copying every batch kept the host from queuing the next forward while the device ran
this one. The values are the same; only the moment of the copies changes (eval_accumulation_steps, a byte limit,
CUDA graphs' overwritten outputs and the evaluation's end decide it)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import TensorDataset

from braeburn.trainer import evaluation
from braeburn.trainer.evaluation import HostBatches


class Recorder:
    """Counts forwards, and records after how many forwards each host copy happened."""

    def __init__(self) -> None:
        self.forwards, self.copies_at = 0, []

    def hook(self, module, inputs, output) -> None:
        self.forwards += 1


def evaluate_with_copies(tmp_path, monkeypatch, wrap=lambda model: model, **options):
    from braeburn import Trainer, TrainingConfig

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(40, 6), torch.randint(0, 3, (40,)))
    model = torch.nn.Linear(6, 3)
    recorder = Recorder()
    model.register_forward_hook(recorder.hook)
    original = evaluation._to_cpu

    def to_cpu(data):
        recorder.copies_at.append(recorder.forwards)
        return original(data)

    monkeypatch.setattr(evaluation, "_to_cpu", to_cpu)
    config = TrainingConfig(output_dir=str(tmp_path), per_device_eval_batch_size=8, disable_tqdm=True,
                            use_cpu=True, **options)
    seen = {}

    def metrics(prediction):
        seen["predictions"], seen["labels"] = prediction.predictions, prediction.label_ids
        return {"accuracy": float((prediction.predictions.argmax(-1) == prediction.label_ids).mean())}

    trainer = Trainer(wrap(model), config, eval_dataset=data, loss_fn=torch.nn.functional.cross_entropy,
                      compute_metrics=metrics)
    result = trainer.evaluate()
    with torch.no_grad():
        expected = torch.nn.Linear(6, 3)
        expected.load_state_dict(model.state_dict())
        logits = torch.cat([expected(part) for part in data.tensors[0].split(8)]).numpy()  # as evaluate's batches
    return recorder, result, seen, logits, data.tensors[1].numpy()


def test_predictions_and_labels_are_copied_once_all_batches_ran(tmp_path, monkeypatch, cpu_only):
    recorder, result, seen, logits, labels = evaluate_with_copies(tmp_path, monkeypatch)
    assert recorder.forwards == 5
    assert recorder.copies_at == [5] * 10  # 5 batches' predictions and labels, after the last forward
    assert (seen["predictions"] == logits).all() and (seen["labels"] == labels).all()
    assert result["eval_accuracy"] == float((logits.argmax(-1) == labels).mean())


def test_eval_accumulation_steps_copies_every_that_many_batches(tmp_path, monkeypatch, cpu_only):
    recorder, _, seen, logits, labels = evaluate_with_copies(tmp_path, monkeypatch, eval_accumulation_steps=2)
    # predictions and labels of batches 1-2 after the 2nd forward, 3-4 after the 4th, the 5th at the end
    assert recorder.copies_at == [2, 2, 2, 2, 4, 4, 4, 4, 5, 5]
    assert (seen["predictions"] == logits).all() and (seen["labels"] == labels).all()


def test_outputs_that_the_next_call_overwrites_are_copied_at_once(tmp_path, monkeypatch, cpu_only):
    monkeypatch.setattr(evaluation, "outputs_are_overwritten", lambda mode: True)  # CUDA graphs' outputs
    recorder, _, seen, logits, _ = evaluate_with_copies(tmp_path, monkeypatch)
    assert recorder.copies_at == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert (seen["predictions"] == logits).all()


@pytest.mark.parametrize("compile_it", [
    lambda model: torch.compile(model, mode="reduce-overhead"),
    lambda model: torch.compile(model, mode="max-autotune"),
    lambda model: torch.compile(model, options={"triton.cudagraphs": True}),
    lambda model: model.compile(mode="reduce-overhead") or model,
], ids=["reduce-overhead", "max-autotune", "option", "module.compile"])
def test_a_model_its_user_compiled_with_cuda_graphs_has_each_batch_copied_at_once(tmp_path, monkeypatch, cpu_only,
                                                                                  compile_it):
    # the user's torch.compile: its next call overwrites this one's outputs on a GPU, as braeburn's own CUDA-graph
    # modes do; Dynamo is off here, so the compiled wrapper runs the model eagerly on the CPU
    with torch._dynamo.config.patch(disable=True):
        recorder, _, seen, logits, _ = evaluate_with_copies(tmp_path, monkeypatch, wrap=compile_it)
    assert recorder.copies_at == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert (seen["predictions"] == logits).all()


@pytest.mark.parametrize("compile_it", [lambda model: model, lambda model: torch.compile(model),
                                        lambda model: torch.compile(model, mode="max-autotune-no-cudagraphs")],
                         ids=["eager", "default", "no-cudagraphs"])
def test_a_model_compiled_without_cuda_graphs_keeps_its_batches_until_the_end(tmp_path, monkeypatch, cpu_only,
                                                                             compile_it):
    with torch._dynamo.config.patch(disable=True):
        recorder, _, _, _, _ = evaluate_with_copies(tmp_path, monkeypatch, wrap=compile_it)
    assert recorder.copies_at == [5] * 10


def test_batches_are_copied_once_they_hold_the_byte_limit_counting_the_storage_a_view_keeps():
    copied = []
    batches = HostBatches(limit_bytes=1000, to_host=lambda data: copied.append(data) or data)
    big = torch.zeros(1000, dtype=torch.uint8)
    batches.add(torch.zeros(10))  # 40 bytes: kept
    assert copied == []
    batches.add(big[:4])  # a view of 4 bytes that keeps 1,000 alive: over the limit, both copied
    assert len(copied) == 2
    batches.add({"logits": torch.ones(3)})
    assert len(copied) == 2
    kept = batches.on_host()
    assert len(copied) == 3 and [type(item) for item in kept] == [torch.Tensor, torch.Tensor, dict]
