"""predict() on 2 processes (gloo, torchrun on the CPU) when each process's batch pads its sequences to another
length (a collator padding to the longest in the batch, as Transformers' DataCollatorWithPadding does): the
predictions and labels are padded with -100 across the processes before they are gathered, as Transformers'
evaluation loop does, and equal one process's, where the batches are padded to the longest sequence of all."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from tests.compat._two_processes import run_two_processes

pytestmark = pytest.mark.slow  # one torchrun with 2 gloo processes

COMMON = textwrap.dedent('''
    import torch
    from torch.utils.data import Dataset


    class Sequences(Dataset):
        """11 sequences of 3 to 8 steps: each process's batches hold sequences of other lengths."""

        def __init__(self):
            generator = torch.Generator().manual_seed(0)
            self.items = []
            for index in range(11):
                length = 3 + (index * 7) % 6
                self.items.append({"x": torch.randn(length, 4, generator=generator),
                                   "labels": torch.randint(0, 5, (length,), generator=generator)})

        def __len__(self):
            return len(self.items)

        def __getitem__(self, index):
            return self.items[index]


    def pad_to_longest(items):
        longest = max(len(item["x"]) for item in items)
        x, labels = torch.zeros(len(items), longest, 4), torch.full((len(items), longest), -100)
        for row, item in enumerate(items):
            x[row, :len(item["x"])], labels[row, :len(item["labels"])] = item["x"], item["labels"]
        return {"x": x, "labels": labels}


    class Tagger(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.linear = torch.nn.Linear(4, 5)

        def forward(self, x, labels=None):
            logits = self.linear(x)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 5), labels.reshape(-1))
            return {"loss": loss, "logits": logits, "pooled": logits.mean(1)}


    def predict(out):
        from braeburn import Trainer, TrainingArguments

        args = TrainingArguments(output_dir=out, per_device_eval_batch_size=2, report_to=[], use_cpu=True,
                                 disable_tqdm=True)
        trainer = Trainer(model=Tagger(), args=args, data_collator=pad_to_longest)
        return trainer.predict(Sequences())
''')

SCRIPT = COMMON + textwrap.dedent('''
    import json, sys

    output = predict(sys.argv[2] + "-run")
    logits, pooled = output.predictions
    result = {"logits": logits.tolist(), "pooled": pooled.tolist(), "labels": output.label_ids.tolist()}
    import torch.distributed as dist
    with open(f"{sys.argv[2]}.{dist.get_rank()}.json", "w") as handle:
        json.dump(result, handle)
''')


def test_predictions_of_other_lengths_on_each_process_are_padded_with_minus_100_and_gathered(tmp_path, cpu_only):
    namespace: dict = {}
    exec(compile(COMMON, "common", "exec"), namespace)  # the same data and model in this one process
    one = namespace["predict"](str(tmp_path / "one"))
    ranks = run_two_processes(SCRIPT, "predict_job.py", "braeburn", tmp_path)
    logits, pooled = one.predictions
    assert logits.shape == (11, 8, 5) and one.label_ids.shape == (11, 8)
    for result in ranks:  # every process gathers all 11 samples (the padded duplicate dropped)
        assert np.array_equal(np.asarray(result["labels"]), one.label_ids)
        assert np.array_equal(np.asarray(result["logits"], dtype=np.float32), logits)  # padding included (-100)
        assert np.array_equal(np.asarray(result["pooled"], dtype=np.float32), pooled)
    assert (logits == -100).any() and (one.label_ids == -100).any()  # batches padded to the longest of all
