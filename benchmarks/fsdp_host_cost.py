"""The host's share of an FSDP2 step against a plain module's, in one CPU process (gloo, world size 1).

    python benchmarks/fsdp_host_cost.py [--rounds 3]

A BERT-base-shaped model (12 layers, 201 parameter tensors, as BERT-base has) at tiny sizes, so the arithmetic is
negligible and what is timed is the host's work: forward, backward, AdamW (fused) and zero_grad, as a plain module,
as one FSDP unit (the root alone, braeburn's default for a model that fits) and with a unit per layer, each with
``reshard_after_forward=False``. On one process the collectives are trivial, so the extra time is FSDP's hooks,
its parameter copies and the DTensor dispatch (the optimizer's included). Median ms of steps 11-60 per round.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist


def model():
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    return BertForSequenceClassification(BertConfig(hidden_size=32, num_hidden_layers=12, num_attention_heads=2,
                                                    intermediate_size=64, vocab_size=100, max_position_embeddings=32))


def time_parts(net, steps: int = 60, skip: int = 10) -> dict:
    x, y = torch.randint(0, 100, (4, 16)), torch.randint(0, 2, (4,))
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4, fused=True)
    parts: dict[str, list[float]] = {"forward": [], "backward": [], "optimizer": [], "zero_grad": []}
    for step in range(steps):
        t0 = time.perf_counter()
        loss = net(input_ids=x, labels=y).loss
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        optimizer.step()
        t3 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        t4 = time.perf_counter()
        if step >= skip:
            for key, a, b in zip(parts, (t0, t1, t2, t3), (t1, t2, t3, t4)):
                parts[key].append((b - a) * 1e3)
    out = {key: round(statistics.median(values), 2) for key, values in parts.items()}
    out["step"] = round(sum(out.values()), 2)
    return out


def variants(mesh):
    from torch.distributed.fsdp import fully_shard

    yield "plain module", model()
    yield "FSDP, the root alone", fully_shard(model(), mesh=mesh, reshard_after_forward=False)
    net = model()
    for layer in net.bert.encoder.layer:
        fully_shard(layer, mesh=mesh, reshard_after_forward=False)
    yield "FSDP, a unit per layer", fully_shard(net, mesh=mesh, reshard_after_forward=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29533"), RANK="0",
                      WORLD_SIZE="1")
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (1,))
    rows: dict[str, list[dict]] = {}
    for _ in range(args.rounds):
        for name, net in variants(mesh):
            rows.setdefault(name, []).append(time_parts(net))
    dist.destroy_process_group()
    print("| variant | " + " | ".join(f"{key}, ms" for key in rows["plain module"][0]) + " |")
    print("|---|" + "---|" * len(rows["plain module"][0]))
    for name, results in rows.items():
        cells = [f"{statistics.median(r[key] for r in results):.2f} ({min(r[key] for r in results):.2f}-"
                 f"{max(r[key] for r in results):.2f})" for key in results[0]]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
