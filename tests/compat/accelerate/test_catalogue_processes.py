"""Accelerate's idioms on two processes: one real 2-process gloo run (torchrun, CPU) per library runs every idiom
below in one script (tests/compat/_two_processes.py), and each idiom compares its part of what the ranks
recorded. See tests/compat/catalogue.py for the outcomes."""

from __future__ import annotations

import textwrap

import pytest

from tests.compat.catalogue import Catalogue, Observation, assert_identical, assert_on_purpose
try:  # (where the layout of tests/ puts it; tests/conformance/ before that)
    from tests.compat._two_processes import run_two_processes
except ImportError:
    from tests.conformance._two_processes import run_two_processes

pytestmark = pytest.mark.slow  # one torchrun with 2 gloo processes per library, for every idiom below

CATALOGUE = Catalogue("accelerate")
idiom = CATALOGUE.idiom

SCRIPT = textwrap.dedent('''
    import contextlib, importlib, io, json, os, sys, warnings

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    lib = importlib.import_module(sys.argv[1])
    out = sys.argv[2]
    said = io.StringIO()
    warnings.simplefilter("always")
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(said):
        torch.manual_seed(0)
        accelerator = lib.Accelerator(gradient_accumulation_steps=2)
        rank = accelerator.process_index
        r = {"who": [accelerator.process_index, accelerator.num_processes, accelerator.is_main_process,
                     accelerator.is_local_main_process, accelerator.is_last_process,
                     str(accelerator.distributed_type), str(accelerator.state.distributed_type),
                     accelerator.state.num_processes, accelerator.state.process_index, accelerator.state.backend]}

        def data(n):
            generator = torch.Generator().manual_seed(1)
            return TensorDataset(torch.randn(n, 3, generator=generator), torch.arange(n))

        model = torch.nn.Linear(3, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train = DataLoader(data(10), batch_size=2, shuffle=True)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
        model, optimizer, train, scheduler = accelerator.prepare(model, optimizer, train, scheduler)
        r["lr"] = []
        r["loader"] = [train.batch_size, train.total_batch_size, len(train)]
        r["losses"], r["seen"], r["sync"], r["end"] = [], [], [], []
        for epoch in range(2):
            for inputs, index in train:
                with accelerator.accumulate(model):
                    loss = torch.nn.functional.cross_entropy(model(inputs), index % 2)
                    accelerator.backward(loss)
                    if accelerator.sync_gradients:
                        accelerator.clip_grad_norm_(model.parameters(), 1.0)
                    optimizer.step()
                    scheduler.step()
                    optimizer.zero_grad()
                r["lr"].append(optimizer.param_groups[0]["lr"])
                r["losses"].append(loss.item())
                r["seen"].append(index.tolist())
                r["sync"].append(accelerator.sync_gradients)
                r["end"].append([accelerator.gradient_state.end_of_dataloader, accelerator.gradient_state.remainder])
        r["weights"] = [v for p in accelerator.unwrap_model(model).parameters() for v in p.detach().flatten().tolist()]

        evaluation = accelerator.prepare(DataLoader(data(7), batch_size=2))
        r["eval_len"] = len(evaluation)
        kept, raw, objects = [], [], []
        for inputs, index in evaluation:
            raw.append(accelerator.gather(index).tolist())
            kept += accelerator.gather_for_metrics(index).tolist()
            objects += accelerator.gather_for_metrics([f"sample {i}" for i in index.tolist()])
        r["gather"], r["gather_for_metrics"], r["gather_objects"] = raw, kept, objects

        losses = []
        for inputs, index in evaluation:  # as Accelerate's examples log an eval loss
            loss = torch.nn.functional.cross_entropy(model(inputs), index % 2)
            losses.append(accelerator.gather_for_metrics(loss.repeat(inputs.shape[0])).tolist())
        r["loss_repeat"] = losses
        r["gather_scalar"] = accelerator.gather(torch.tensor(float(rank))).tolist()
        nested = accelerator.gather({"a": torch.tensor([rank]), "b": [torch.tensor([[rank, 1]])]})
        r["gather_nested"] = {"a": nested["a"].tolist(), "b": [t.tolist() for t in nested["b"]]}
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            accelerator.print("from", rank)
        r["printed"] = printed.getvalue()

        class Stream(torch.utils.data.IterableDataset):
            def __iter__(self):
                return iter(range(8))

        try:
            r["stream"] = [b.tolist() for b in accelerator.prepare(DataLoader(Stream(), batch_size=2))]
        except Exception as error:
            r["stream"] = f"{type(error).__name__}: {error}"
        value = torch.tensor([float(rank + 1), 10.0 * (rank + 1)])
        r["reduce"] = [accelerator.reduce(value, "sum").tolist(), accelerator.reduce(value, "mean").tolist()]
        r["pad"] = accelerator.gather(accelerator.pad_across_processes(
            torch.full((rank + 1, 2), rank + 1), dim=0, pad_index=-1)).tolist()
        shares = []
        for inputs, padding in ((["a", "b", "c"], False), (["a", "b", "c"], True), ({"x": [1, 2, 3]}, False),
                                (torch.arange(5), False)):
            with accelerator.split_between_processes(inputs, apply_padding=padding) as share:
                shares.append(share.tolist() if hasattr(share, "tolist") else share)
        r["split"] = shares
        r["decorated"] = [accelerator.on_main_process(lambda: "main")(), accelerator.on_process(
            lambda: "one", process_index=1)(), accelerator.on_last_process(lambda: "last")()]
        accelerator.save_state(os.path.join(os.path.dirname(out), sys.argv[1] + "_ckpt"))
        accelerator.wait_for_everyone()
        folder = os.path.join(os.path.dirname(out), sys.argv[1] + "_ckpt")
        r["files"] = sorted(os.listdir(folder))
        torch.manual_seed(5)  # (the refused IterableDataset above drew nothing here, one number under Accelerate)
        mine = accelerator.prepare(DataLoader(data(10), batch_size=2, shuffle=True,
                                              generator=torch.Generator().manual_seed(3)))
        r["user_generator"] = [index.tolist() for _ in range(2) for _, index in mine]
        r["after_user_generator"] = torch.rand(2).tolist()
    r["said"] = [line for line in said.getvalue().splitlines() + [str(w.message) for w in caught]
                 if line.startswith("braeburn:") and "training on" not in line]
    with open(f"{out}.{rank}.json", "w") as handle:
        json.dump(r, handle)
    accelerator.wait_for_everyone()
    accelerator.end_training()
''')

_RUNS: dict[str, list[dict]] = {}


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """Each library's two ranks' records (one 2-process run per library, shared by every idiom here)."""
    pytest.importorskip("accelerate")
    if not _RUNS:
        folder = tmp_path_factory.mktemp("two_processes")
        for lib in ("accelerate", "braeburn"):
            _RUNS[lib] = run_two_processes(SCRIPT, "catalogue.py", lib, folder)
    return _RUNS


def _compare(ranks, *keys, **kwargs):
    for rank in (0, 1):
        peer = Observation(extra={k: ranks["accelerate"][rank][k] for k in keys})
        ours = Observation(extra={k: ranks["braeburn"][rank][k] for k in keys})
        assert_identical(peer, ours, **kwargs)
    for rank in (0, 1):  # nothing said but the save_state() line of the last idiom
        assert [line for line in ranks["braeburn"][rank]["said"] if "save_state()" not in line] == []


@idiom("2 processes: process_index / num_processes / is_main_process / is_last_process / distributed_type / "
       "accelerator.state.*", "identical", "the same values on each rank")
def _who(ranks):
    _compare(ranks, "who")


@idiom("2 processes: a shuffled DataLoader + accumulate(model) + clip_grad_norm_ under DDP", "identical",
       "bitwise losses per step on each rank, the same samples per rank and epoch, the same sync_gradients and "
       "final weights")
def _train(ranks):
    _compare(ranks, "losses", "seen", "sync", "weights")


@idiom("2 processes: gradient_state.end_of_dataloader / remainder at each batch", "identical",
       "the same values on each rank")
def _end_of_dataloader(ranks):
    _compare(ranks, "end")


@idiom("2 processes: prepared_loader.batch_size / total_batch_size / len(prepared_loader)", "identical",
       "None, 4 and 3 on each rank (even_batches: the uneven rest is padded)")
def _loader_attributes(ranks):
    _compare(ranks, "loader", "eval_len")


@idiom("2 processes: accelerator.gather(tensor) over an uneven eval DataLoader (even_batches)", "identical",
       "the same gathered tensors, the padding samples included")
def _gather(ranks):
    _compare(ranks, "gather")


@idiom("2 processes: accelerator.gather_for_metrics(tensor) and of a list of strings, with a short last batch",
       "identical", "the same samples, each once: the duplicates added to even the batches are dropped")
def _gather_for_metrics(ranks):
    _compare(ranks, "gather_for_metrics", "gather_objects")


@idiom("2 processes: accelerator.gather_for_metrics(loss.repeat(batch_size)) per eval batch, "
       "accelerator.gather(0-d tensor)", "identical", "the same values: one loss per real sample; a 0-d tensor "
       "gathered into one value per process")
def _gather_loss(ranks):
    _compare(ranks, "loss_repeat", "gather_scalar")


@idiom("2 processes: accelerator.gather({'a': tensor, 'b': [tensor]}) (nested)", "identical", "the same structure")
def _gather_nested(ranks):
    _compare(ranks, "gather_nested")


@idiom("2 processes: accelerator.print(...)", "identical", "printed by the main process only")
def _print(ranks):
    _compare(ranks, "printed")


@idiom("2 processes: a LambdaLR prepared and stepped per batch inside accumulate()", "identical",
       "the same learning rate at every batch on each rank (N schedule steps per optimizer step, as Accelerate)")
def _scheduler(ranks):
    _compare(ranks, "lr")


@idiom("2 processes: prepare(DataLoader(IterableDataset)) (Accelerate shards it sample by sample)", "refused",
       "build it from a map-style dataset with batch_size=... (braeburn then shards it), or shard it yourself and "
       "keep it out of prepare()")
def _iterable_on_two_processes(ranks):
    assert isinstance(ranks["accelerate"][0]["stream"], list) and ranks["accelerate"][0]["stream"]
    for rank in (0, 1):  # before any batch, on every rank: one error naming the idiom and the way out
        refusal = ranks["braeburn"][rank]["stream"]
        assert refusal.startswith("ValueError: prepare() got a DataLoader with an IterableDataset"), refusal
        assert "map-style dataset and batch_size=" in refusal and "keep it out of prepare()" in refusal


@idiom("2 processes: accelerator.reduce(tensor, 'sum') / reduce(tensor, 'mean')", "identical",
       "the same values on each rank")
def _reduce(ranks):
    _compare(ranks, "reduce")


@idiom("2 processes: accelerator.pad_across_processes(tensor, dim=0, pad_index=-1) + gather", "identical",
       "the same padded tensors")
def _pad(ranks):
    _compare(ranks, "pad")


@idiom("2 processes: split_between_processes(list / list, apply_padding=True / dict / tensor)", "identical",
       "the same share on each rank")
def _split(ranks):
    _compare(ranks, "split")


@idiom("2 processes: @on_main_process / @on_process(process_index=1) / @on_last_process", "identical",
       "the same functions run on the same ranks")
def _decorated(ranks):
    _compare(ranks, "decorated")


@idiom("2 processes: DataLoader(shuffle=True, generator=torch.Generator().manual_seed(3)) prepared", "identical",
       "the same samples per rank and epoch (the generator's order, from its seed), the same random numbers after")
def _users_generator(ranks):
    _compare(ranks, "user_generator", "after_user_generator")


@idiom("2 processes: accelerator.save_state(folder)", "on purpose",
       "save_state()'s line; Accelerate's model.safetensors and optimizer.bin, braeburn's rng_state_<rank>.pt "
       "for each rank where Accelerate writes random_states_<rank>.pkl")
def _save_state(ranks):
    theirs = [f for f in ranks["accelerate"][0]["files"] if not f.startswith("random_states_")]
    ours = [f for f in ranks["braeburn"][0]["files"] if not f.startswith("rng_state_")
            and f not in ("accelerator.pt", "manifest.json", "dataloader_0.pt", "dataloader_1.pt")]
    assert theirs == ours
    assert [f for f in ranks["accelerate"][0]["files"] if f.startswith("random_states_")] == [
        "random_states_0.pkl", "random_states_1.pkl"]
    assert [f for f in ranks["braeburn"][0]["files"] if f.startswith("rng_state_")] == ["rng_state_0.pt",
                                                                                         "rng_state_1.pt"]
    assert_on_purpose(ranks["braeburn"][0]["said"], "save_state()")


# (last: the parameters are the idioms registered above)
@pytest.mark.parametrize("case", CATALOGUE.params())
def test_idiom(case, ranks):
    case.run(ranks)
