"""What users keep after a run. A ``checkpoint-N`` folder of a Transformers model loads with
``from_pretrained`` (config.json + model.safetensors, as Transformers' Trainer writes it), model weights are
never a pickle, and a checkpoint written before (``model_0.pt``) still resumes exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.utils.data import TensorDataset

from braeburn import Trainer, TrainingConfig
from braeburn.trainer.checkpoint import CheckpointManager, write_manifest
from tests.compat import _tiny as tiny

pytestmark = pytest.mark.usefixtures("one_thread", "cpu_only")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")


def settings(**options):
    return {"per_device_train_batch_size": 4, "max_steps": 4, "save_strategy": "steps", "save_steps": 2,
            "logging_steps": 2, "disable_tqdm": True, "learning_rate": 1e-2,
            "lr_scheduler_type": "constant", **options}  # constant: a run cut at step 2 continues as one of 4 steps


def token_rows(count: int, vocab: int, mlm: bool = False) -> list[dict]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(5, vocab, (count, 8), generator=generator)
    return [{"input_ids": row, "attention_mask": torch.ones(8, dtype=torch.long),
             "labels": row.clone() if mlm else (row[0] % 2).long()} for row in ids]


def bert_trainer(out: Path, model_class: str = "BertForSequenceClassification", processing_class=None,
                 **options) -> Trainer:
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=16, num_labels=2)
    model = getattr(transformers, model_class)(config)
    rows = token_rows(16, 40, mlm=model_class == "BertForMaskedLM")
    return Trainer(model, TrainingConfig(output_dir=str(out), use_cpu=True, **settings(**options)), train_dataset=rows,
                   processing_class=processing_class)


class TiedModule(torch.nn.Module):
    """A plain module whose output layer shares its weight with the embedding (safetensors refuses shared
    memory), and a buffer that is a view inside that weight (written as a copy)."""

    def __init__(self):
        super().__init__()
        self.embed, self.out = torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10)
        self.out.weight = self.embed.weight
        self.register_buffer("table", self.embed.weight.detach()[2:5])

    def forward(self, x):
        return self.out(self.embed(x).mean(dim=1))


def tied_module() -> TiedModule:
    torch.manual_seed(0)
    return TiedModule()


def plain_trainer(out: Path, **options) -> Trainer:
    model = tied_module()
    x = torch.randint(0, 10, (16, 3), generator=torch.Generator().manual_seed(2))  # 3 tokens a row
    y = torch.randint(0, 10, (16,), generator=torch.Generator().manual_seed(3))
    return Trainer(model, TrainingConfig(output_dir=str(out), use_cpu=True, **settings(**options)),
                   train_dataset=TensorDataset(x, y), loss_fn=torch.nn.functional.cross_entropy)


def tensors_in(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
    return [t for item in items for t in tensors_in(item)]


def final_weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    model = trainer.accelerator.unwrap_model(trainer._prepared_model)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("background", [False, True], ids=["foreground", "background"])
def test_from_pretrained_loads_every_checkpoint_and_the_final_output(tmp_path, background):
    out = tmp_path / "out"
    tokenizer = tiny.tokenizer(tmp_path / "vocab")
    trainer = bert_trainer(out, processing_class=tokenizer, save_in_background=background)
    trainer.train()
    trainer.save_model()
    final = final_weights(trainer)
    probe = {"input_ids": torch.randint(5, 40, (3, 8), generator=torch.Generator().manual_seed(4))}
    trained = trainer.accelerator.unwrap_model(trainer._prepared_model).eval()
    for folder in (out / "checkpoint-2", out / "checkpoint-4", out):
        loaded, info = transformers.AutoModelForSequenceClassification.from_pretrained(folder, output_loading_info=True)
        assert type(loaded) is transformers.BertForSequenceClassification
        assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
        weights = loaded.state_dict()
        if folder.name != "checkpoint-2":  # the last checkpoint and the final output hold the trained model
            assert same(weights, final), folder
            with torch.no_grad():
                assert torch.equal(loaded.eval()(**probe).logits, trained(**probe).logits)
        assert same(weights, safetensors_torch.load_file(folder / "model.safetensors"))
        reloaded = transformers.AutoTokenizer.from_pretrained(folder)  # the tokenizer too, as Transformers saves it
        assert reloaded("the cat sat")["input_ids"] == tokenizer("the cat sat")["input_ids"]
    for folder in (out / "checkpoint-2", out / "checkpoint-4"):
        manifest = json.loads((folder / "manifest.json").read_text())["files"]
        assert {"config.json", "model.safetensors", "tokenizer_config.json"} <= manifest.keys()
        assert "model_0.pt" not in manifest
        assert json.loads((folder / "config.json").read_text())["architectures"] == ["BertForSequenceClassification"]
        CheckpointManager(out).verify(folder)  # the checksums cover the new files


def test_tied_weights_load_with_from_pretrained_and_resume_exactly(tmp_path):
    reference = bert_trainer(tmp_path / "reference", "BertForMaskedLM", save_in_background=False)
    reference.train()
    checkpoint = tmp_path / "reference" / "checkpoint-4"
    loaded, info = transformers.BertForMaskedLM.from_pretrained(checkpoint, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert same(loaded.state_dict(), final_weights(reference))
    assert loaded.cls.predictions.decoder.weight is loaded.bert.embeddings.word_embeddings.weight
    stored = safetensors_torch.load_file(checkpoint / "model.safetensors")
    assert "cls.predictions.decoder.weight" not in stored  # written once, as Transformers writes tied weights

    first = bert_trainer(tmp_path / "out", "BertForMaskedLM", save_in_background=False, max_steps=2)
    first.train()
    resumed = bert_trainer(tmp_path / "out", "BertForMaskedLM", save_in_background=False)
    resumed.train(resume_from_checkpoint="latest")
    assert same(final_weights(resumed), final_weights(reference))


def test_a_plain_module_checkpoint_holds_no_pickle_of_its_weights(tmp_path):
    trainer = plain_trainer(tmp_path / "out", save_in_background=False)
    trainer.train()
    folder = tmp_path / "out" / "checkpoint-4"
    assert not list(folder.glob("model*.pt"))
    weights = final_weights(trainer)
    for pickled in folder.glob("*.pt"):  # optimizer, scheduler, RNG, positions: torch.save, with no weight in them
        held = tensors_in(torch.load(pickled, weights_only=True))
        assert not any(t.shape == w.shape and torch.equal(t, w) for t in held for w in weights.values()), pickled.name
    stored = safetensors_torch.load_file(folder / "model.safetensors")
    assert set(stored) == set(weights) - {"out.weight"}  # the tied output weight is the embedding's, written once
    assert all(torch.equal(stored[name], weights[name]) for name in stored)
    assert not (folder / "config.json").exists()  # only a Transformers model has one

    reference = plain_trainer(tmp_path / "reference", save_in_background=False, max_steps=6)
    reference.train()
    resumed = plain_trainer(tmp_path / "out", save_in_background=False, max_steps=6)
    resumed.train(resume_from_checkpoint=str(folder))
    assert same(final_weights(resumed), final_weights(reference))
    model = resumed.accelerator.unwrap_model(resumed._prepared_model)
    assert model.out.weight is model.embed.weight  # still tied after the resume
    assert model.table.untyped_storage().data_ptr() == model.embed.weight.untyped_storage().data_ptr()


def to_old_layout(folder: Path, step: int) -> None:
    """What braeburn wrote before weights were safetensors: the weights as torch.save's model_0.pt, and no config.json."""
    weights = safetensors_torch.load_file(folder / "model.safetensors")
    model = tied_module()
    model.load_state_dict({**weights, "out.weight": weights["embed.weight"]})
    torch.save(model.state_dict(), folder / "model_0.pt")
    (folder / "model.safetensors").unlink()
    (folder / "manifest.json").unlink()
    write_manifest(folder, step)


def test_an_old_layout_checkpoint_still_resumes_exactly(tmp_path):
    reference = plain_trainer(tmp_path / "reference", save_in_background=False)
    reference.train()
    first = plain_trainer(tmp_path / "out", save_in_background=False, max_steps=2)
    first.train()
    to_old_layout(tmp_path / "out" / "checkpoint-2", 2)
    resumed = plain_trainer(tmp_path / "out")
    resumed.train(resume_from_checkpoint="latest")
    assert same(final_weights(resumed), final_weights(reference))
    written = tmp_path / "out" / "checkpoint-4"  # the checkpoints after the resume are in the new layout
    assert (written / "model.safetensors").is_file() and not (written / "model_0.pt").exists()


def test_a_wrapper_that_is_not_a_transformers_model_gets_no_config(tmp_path):
    """A PEFT-like wrapper forwards config and save_pretrained, but its state dict names its own layers: a
    config.json beside it would make from_pretrained load a model with none of its weights."""
    class Wrapper(torch.nn.Module):
        def __init__(self, base):
            super().__init__()
            self.base_model, self.config = base, base.config

        def save_pretrained(self, folder):
            raise AssertionError("not called")

    from braeburn.compat.transformers.files import pretrained_config_files

    base = bert_trainer(tmp_path / "unused").model
    assert set(pretrained_config_files(base)) == {"config.json"}
    assert pretrained_config_files(Wrapper(base)) == {}
