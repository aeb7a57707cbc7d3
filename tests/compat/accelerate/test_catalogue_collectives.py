"""Accelerate's evaluation and collective idioms on one process (gather_for_metrics, gather, reduce,
pad_across_processes, unwrap_model, get_state_dict ...): each written as Accelerate 1.15's docs write it, run under
``accelerate.Accelerator`` and ``braeburn.Accelerator`` in the same test (CPU, one thread). See
tests/compat/catalogue.py for the outcomes."""

from __future__ import annotations

import pytest
import torch

from tests.compat.accelerate._peers import cpu_for_accelerate  # noqa: F401  (an autouse fixture)
from tests.compat.accelerate._peers import identical as _identical, model, setup, weights
from tests.compat.catalogue import Catalogue, Observation

CATALOGUE = Catalogue("accelerate")
idiom = CATALOGUE.idiom


# -- evaluation and collectives on one process ---------------------------------------------------------

@idiom("accelerator.gather_for_metrics((predictions, labels)) over an eval loop with a short last batch",
       "identical", "the same predictions and labels, none repeated")
def _gather_for_metrics(tmp_path):
    def script(lib, folder):
        accelerator, net, optimizer, data = setup(lib)
        net.eval()
        predictions, references = [], []
        for inputs, labels in data:
            with torch.no_grad():
                guess = net(inputs).argmax(dim=-1)
            guess, labels = accelerator.gather_for_metrics((guess, labels))
            predictions += guess.tolist()
            references += labels.tolist()
        return Observation(metrics={"predictions": predictions, "references": references})

    _identical(script, tmp_path)


@idiom("accelerator.gather_for_metrics(['text', ...], use_gather_object=True)", "identical", "the same list")
def _gather_objects(tmp_path):
    def script(lib, folder):
        accelerator = lib.Accelerator()
        return Observation(extra={"gathered": accelerator.gather_for_metrics(["a", "b"], use_gather_object=True)})

    _identical(script, tmp_path)


@idiom("accelerator.gather(tensor), accelerator.reduce(tensor, 'sum'/'mean')", "identical", "the same values")
def _gather_reduce(tmp_path):
    def script(lib, folder):
        accelerator = lib.Accelerator()
        value = torch.tensor([1.0, 2.0, 4.0])
        return Observation(metrics={"gather": accelerator.gather(value).tolist(),
                                    "sum": accelerator.reduce(value, "sum").tolist(),
                                    "mean": accelerator.reduce(value, "mean").tolist()})

    _identical(script, tmp_path)


@idiom("accelerator.pad_across_processes(tensor, dim=1, pad_index=-100)", "identical", "the same tensor")
def _pad(tmp_path):
    def script(lib, folder):
        accelerator = lib.Accelerator()
        return Observation(metrics={"padded": accelerator.pad_across_processes(
            torch.arange(6).view(2, 3), dim=1, pad_index=-100).tolist()})

    _identical(script, tmp_path)


@idiom("accelerator.unwrap_model(model) / unwrap_model(model, keep_fp32_wrapper=False)", "identical",
       "the user's module, its state dict's keys and values")
def _unwrap(tmp_path):
    def script(lib, folder):
        accelerator, net, optimizer, data = setup(lib)
        assert accelerator.unwrap_model(net, keep_fp32_wrapper=False) is accelerator.unwrap_model(net)
        inner = accelerator.unwrap_model(net)
        return Observation(extra={"type": type(inner).__name__, "keys": list(inner.state_dict()),
                                  "weights": weights(inner)})

    _identical(script, tmp_path)


@idiom("Accelerate's keywords: prepare(model, optimizer, device_placement=[True, True]), reduce(t, 'mean', "
       "scale=2.0), autocast(autocast_handler=AutocastKwargs())", "identical", "the same values")
def _keywords(tmp_path):
    from accelerate.utils import AutocastKwargs

    def script(lib, folder):
        accelerator = lib.Accelerator()
        net, optimizer = accelerator.prepare(model(), torch.optim.SGD(model().parameters(), lr=0.1),
                                             device_placement=[True, True])
        reduced = accelerator.reduce(torch.tensor([1.0, 3.0]), "mean", scale=2.0)
        with accelerator.autocast(autocast_handler=AutocastKwargs()):
            out = net(torch.ones(1, 3))
        return Observation(extra={"reduced": reduced.tolist(), "out": out.tolist()})

    _identical(script, tmp_path)


@idiom("accelerator.get_state_dict(model)", "identical", "the same keys and tensors")
def _get_state_dict(tmp_path):
    def script(lib, folder):
        accelerator, net, optimizer, data = setup(lib)
        state = accelerator.get_state_dict(net)
        return Observation(extra={k: v.tolist() for k, v in state.items()})

    _identical(script, tmp_path)


# (last: the parameters are the idioms registered above)
@pytest.mark.slow  # the one-process catalogue took 10 s as one file with two CPU burners (benchmarks/test_time.sh)
@pytest.mark.parametrize("case", CATALOGUE.params())
def test_idiom(case, tmp_path):
    case.run(tmp_path)
