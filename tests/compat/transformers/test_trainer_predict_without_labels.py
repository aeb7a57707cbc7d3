"""predict() on data without labels, with a model that returns a tuple: the Transformers Trainer's prediction step
keeps every item of the tuple as a prediction (there is no loss to drop), so predictions is a tuple of arrays in
output order; one item alone is the array itself."""

from __future__ import annotations

import numpy as np
import pytest
import torch


class Unlabelled(torch.utils.data.Dataset):
    def __init__(self) -> None:
        self.x = torch.randn(10, 4, generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> dict:
        return {"x": self.x[index]}


class TwoHeads(torch.nn.Module):
    def __init__(self, heads: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear, self.heads = torch.nn.Linear(4, 3), heads

    def forward(self, x, labels=None):
        logits = self.linear(x)
        return (logits, logits.sum(-1))[:self.heads]


@pytest.mark.parametrize("heads", [2, 1])
def test_a_tuple_output_without_labels_gives_each_item_as_a_prediction(hf_lib, tmp_path, heads):
    args = hf_lib.TrainingArguments(output_dir=str(tmp_path / "out"), per_device_eval_batch_size=4, use_cpu=True,
                                    report_to="none", disable_tqdm=True)
    model = TwoHeads(heads)
    output = hf_lib.Trainer(model=model, args=args).predict(Unlabelled())
    with torch.no_grad():
        expected = [item.numpy() for item in model(Unlabelled().x)]
    assert output.label_ids is None
    if heads == 1:
        assert isinstance(output.predictions, np.ndarray)
        np.testing.assert_array_equal(output.predictions, expected[0])
    else:
        assert isinstance(output.predictions, tuple) and len(output.predictions) == 2
        for predicted, wanted in zip(output.predictions, expected):
            np.testing.assert_allclose(predicted, wanted, rtol=1e-6)
