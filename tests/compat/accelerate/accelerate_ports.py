"""Small local ports of Accelerate's examples: the same calls in the same order, with the downloads replaced by
tiny local data (``_tiny``). Each takes the library under test (``lib.Accelerator`` ...) and returns what a user
would observe, so that a test can compare the peer and braeburn.

Ports of: examples/nlp_example.py, cv_example.py, by_feature/checkpointing.py, by_feature/tracking.py,
by_feature/gradient_accumulation.py, by_feature/memory.py.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.utils.data import DataLoader

from .. import _tiny


def _glue_loaders(lib, tok, accelerator, batch_size: int = 8, eval_batch_size: int = 8):
    rows = _tiny.tokenized(_tiny.sentence_pairs(48), tok)
    keep = ("input_ids", "token_type_ids", "attention_mask", "label")

    def collate_fn(examples):  # nlp_example.py's: pad with the tokenizer
        # On TPU it's best to pad everything to the same length or training will be very slow.
        max_length = 128 if accelerator.distributed_type == lib.DistributedType.XLA else None
        examples = [{("labels" if k == "label" else k): v for k, v in e.items() if k in keep} for e in examples]
        return tok.pad(examples, padding="longest", max_length=max_length, return_tensors="pt")

    train = DataLoader(rows[:32], shuffle=True, collate_fn=collate_fn, batch_size=batch_size)
    evals = DataLoader(rows[32:], shuffle=False, collate_fn=collate_fn, batch_size=eval_batch_size)
    return train, evals


def nlp_example(lib, tmp: Path) -> dict:
    """examples/nlp_example.py: BERT on (a tiny) MRPC with AdamW, a linear warmup schedule and gather_for_metrics."""
    from transformers import get_linear_schedule_with_warmup

    accelerator = lib.Accelerator(cpu=True, mixed_precision="no")
    tok = _tiny.tokenizer(tmp / "tok")
    train_dataloader, eval_dataloader = _glue_loaders(lib, tok, accelerator)
    model = _tiny.bert(len(tok))
    optimizer = torch.optim.AdamW(params=model.parameters(), lr=2e-3)
    lr_scheduler = get_linear_schedule_with_warmup(optimizer=optimizer, num_warmup_steps=2,
                                                   num_training_steps=len(train_dataloader) * 2)
    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler)
    seen = 0
    for epoch in range(2):
        model.train()
        for step, batch in enumerate(train_dataloader):
            batch.to(accelerator.device)
            outputs = model(**batch)
            accelerator.backward(outputs.loss)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
        model.eval()
        correct = seen = 0
        for step, batch in enumerate(eval_dataloader):
            batch.to(accelerator.device)
            with torch.no_grad():
                outputs = model(**batch)
            predictions = outputs.logits.argmax(dim=-1)
            predictions, references = accelerator.gather_for_metrics((predictions, batch["labels"]))
            correct += int((predictions == references).sum())
            seen += len(references)
        accelerator.print(f"epoch {epoch}:", {"accuracy": correct / seen})
    accelerator.end_training()
    return {"evaluated": seen, "accuracy_type": type(correct / seen).__name__,
            "device": accelerator.device.type, "lr_after": round(lr_scheduler.get_last_lr()[0], 8)}


def cv_example(lib, tmp: Path, with_tracking: bool = True) -> dict:
    """examples/cv_example.py: a CNN with OneCycleLR, epoch checkpoints (save_state), optional tracking."""
    kwargs = {"log_with": "all", "project_dir": str(tmp / "logs")} if with_tracking else {}
    accelerator = lib.Accelerator(cpu=True, mixed_precision="no", **kwargs)
    if with_tracking:
        accelerator.init_trackers("cv_example", {"lr": 3e-2, "num_epochs": 2, "seed": 42, "batch_size": 8})
    train_dataloader = DataLoader(_tiny.images(48), shuffle=True, batch_size=8)
    eval_dataloader = DataLoader(_tiny.images(24, seed=1), shuffle=False, batch_size=8)
    model = _tiny.small_cnn()
    optimizer = torch.optim.Adam(params=model.parameters(), lr=3e-2 / 25)
    lr_scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer=optimizer, max_lr=3e-2, epochs=2,
                                                       steps_per_epoch=len(train_dataloader))
    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler)
    accurate = num_elems = 0
    for epoch in range(2):
        model.train()
        total_loss = 0.0
        for inputs, labels in train_dataloader:
            outputs = model(inputs)
            loss = torch.nn.functional.cross_entropy(outputs, labels)
            total_loss += loss.detach().float()
            accelerator.backward(loss)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
        output_dir = tmp / f"epoch_{epoch}"
        accelerator.save_state(str(output_dir))
        model.eval()
        accurate = num_elems = 0
        for inputs, labels in eval_dataloader:
            with torch.no_grad():
                predictions = model(inputs).argmax(dim=-1)
            predictions, references = accelerator.gather_for_metrics((predictions, labels))
            accurate_preds = predictions == references
            num_elems += accurate_preds.shape[0]
            accurate += accurate_preds.long().sum()
        eval_metric = accurate.item() / num_elems
        if with_tracking:
            accelerator.log({"accuracy": 100 * eval_metric, "train_loss": total_loss.item() / len(train_dataloader),
                             "epoch": epoch}, step=epoch)
    accelerator.end_training()
    return {"evaluated": num_elems, "accuracy": eval_metric, "epoch_dirs": sorted(p.name for p in tmp.glob("epoch_*")),
            "tensorboard_events": bool(list((tmp / "logs").rglob("events.out.tfevents*"))) if with_tracking else None}


def checkpointing(lib, tmp: Path) -> dict:
    """by_feature/checkpointing.py: save_state every few steps; a second run load_state()s and skips the batches
    done with skip_first_batches. The resumed run must end with the uninterrupted run's weights."""
    def run(stop_after: int | None, resume_from: Path | None) -> torch.Tensor:
        accelerator = lib.Accelerator(cpu=True)
        loader = DataLoader(_tiny.images(40), shuffle=False, batch_size=4)
        model = _tiny.small_cnn(seed=3)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
        model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
        resume_step = 0
        if resume_from is not None:
            accelerator.load_state(str(resume_from))
            resume_step = int(resume_from.name.split("_")[-1])
        active = accelerator.skip_first_batches(loader, resume_step) if resume_step else loader
        for step, (inputs, labels) in enumerate(active, start=resume_step):
            loss = torch.nn.functional.cross_entropy(model(inputs), labels)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            if stop_after is not None and step + 1 == stop_after:
                accelerator.save_state(str(tmp / f"step_{step + 1}"))
                break
        weights = torch.cat([p.detach().flatten() for p in accelerator.unwrap_model(model).parameters()]).clone()
        accelerator.free_memory()
        return weights

    full = run(None, None)
    run(4, None)
    resumed = run(None, tmp / "step_4")
    return {"resumed_equals_uninterrupted": bool(torch.allclose(full, resumed, atol=1e-6)),
            "checkpoint_written": (tmp / "step_4").is_dir()}


def tracking(lib, tmp: Path) -> dict:
    """by_feature/tracking.py: log_with="all" + project_dir, init_trackers with the config, log per epoch."""
    accelerator = lib.Accelerator(cpu=True, log_with="all", project_dir=str(tmp))
    accelerator.init_trackers("tracking_example", config={"lr": 0.1, "num_epochs": 2, "note": "tiny"})
    for epoch in range(2):
        accelerator.log({"train_loss": 1.0 / (epoch + 1), "epoch": epoch}, step=epoch)
    writer = accelerator.get_tracker("tensorboard", unwrap=True)
    wrapped = accelerator.get_tracker("tensorboard")
    accelerator.end_training()
    return {"tensorboard_events": len(list((tmp / "tracking_example").rglob("events.out.tfevents*"))) >= 1,
            "unwrapped_is_writer": hasattr(writer, "add_scalar"), "wrapped_name": wrapped.name}


def gradient_accumulation(lib, tmp: Path) -> list[float]:
    """by_feature/gradient_accumulation.py: accumulate(model) over 2 micro-batches; the final weights."""
    accelerator = lib.Accelerator(cpu=True, gradient_accumulation_steps=2)
    if accelerator.distributed_type == lib.DistributedType.XLA:  # the example's own guard
        raise NotImplementedError("Gradient accumulation on TPUs is currently not supported.")
    generator = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(24, 4, generator=generator), torch.randn(24, 1, generator=generator))
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (step + 1))
    loader = DataLoader(data, batch_size=4, shuffle=False)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    syncs = []
    for inputs, targets in loader:
        with accelerator.accumulate(model):
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        syncs.append(accelerator.sync_gradients)
    weights = [round(float(v), 5) for v in accelerator.unwrap_model(model).weight.detach().flatten()]
    return {"weights": weights, "syncs": syncs, "lr": round(scheduler.get_last_lr()[0], 6)}


def memory(lib, tmp: Path) -> dict:
    """by_feature/memory.py: find_executable_batch_size halves the batch after each out-of-memory error."""
    accelerator = lib.Accelerator(cpu=True)
    tried = []

    @lib.find_executable_batch_size(starting_batch_size=128, reduce_batch_size_fn=lambda: tried[-1] // 2)
    def inner_training_loop(batch_size):
        nonlocal accelerator
        accelerator.free_memory()
        tried.append(batch_size)
        if batch_size > 16:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return batch_size * 2

    result = inner_training_loop()
    default = []

    @lib.find_executable_batch_size(starting_batch_size=100)
    def default_reduction(batch_size):
        default.append(batch_size)
        if batch_size > 70:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    default_reduction()
    default_reduction()  # the size found is kept
    zero = lib.find_executable_batch_size(lambda batch_size: (_ for _ in ()).throw(
        torch.OutOfMemoryError("CUDA out of memory.")), starting_batch_size=2)
    try:
        zero()
        message = None
    except RuntimeError as error:
        message = str(error)
    return {"tried": tried, "result": result, "zero_message": message, "default": default}
