"""evaluate() with a model its user compiled for CUDA graphs: the predictions equal the eager model's.

    python benchmarks/eval_cuda_graph_outputs.py --out OUT

A model compiled with torch.compile(mode="reduce-overhead") replays a CUDA graph whose outputs live in the
graph's memory: the next call overwrites them. evaluate() keeps predictions on the device between its host
copies, except where the next call overwrites them; this runs it twice on the device, with that detection and
with it turned off (what evaluate() did before it knew a user's compile), and writes OUT/eval_cuda_graph_outputs.json:
for each, whether it finished, the largest difference from the eager predictions, and the error if one was raised.
On a device without CUDA graphs (the CPU) both runs match: the check is only meaningful on a GPU.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from torch.utils.data import TensorDataset


def evaluate_compiled(out: Path, mode: str, detect: bool, batches: int, batch: int) -> dict:
    from braeburn import Trainer, TrainingConfig
    from braeburn.trainer import evaluation

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(batches * batch, 64), torch.randint(0, 10, (batches * batch,)))
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    eager = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    eager.load_state_dict(model.state_dict())
    with torch.no_grad():
        expected = torch.cat([eager(part) for part in data.tensors[0].split(batch)]).numpy()
    seen: dict = {}

    def metrics(prediction) -> dict:
        seen["predictions"] = prediction.predictions
        return {"accuracy": float((prediction.predictions.argmax(-1) == prediction.label_ids).mean())}

    detector = evaluation.model_outputs_are_overwritten
    if not detect:
        evaluation.model_outputs_are_overwritten = lambda model: False
    try:
        config = TrainingConfig(output_dir=str(out / f"run-{detect}"), per_device_eval_batch_size=batch,
                                disable_tqdm=True)
        trainer = Trainer(torch.compile(model, mode=mode), config, eval_dataset=data,
                          loss_fn=torch.nn.functional.cross_entropy, compute_metrics=metrics)
        trainer.evaluate()
        difference = float(abs(seen["predictions"] - expected).max())
        return {"detect": detect, "finished": True, "max_difference": difference, "matches": difference < 1e-2,
                "device": str(trainer.accelerator.device)}
    except Exception as error:  # noqa: BLE001 - the outcome is what this check reports
        return {"detect": detect, "finished": False, "matches": False, "error": f"{type(error).__name__}: {error}"[:600]}
    finally:
        evaluation.model_outputs_are_overwritten = detector


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/eval-cuda-graph-outputs")
    parser.add_argument("--mode", default="reduce-overhead")
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = [evaluate_compiled(out, args.mode, detect, args.batches, args.batch) for detect in (True, False)]
    (out / "eval_cuda_graph_outputs.json").write_text(json.dumps({"mode": args.mode, "runs": runs}, indent=1))
    for run in runs:
        print(json.dumps(run))


if __name__ == "__main__":
    main()
