"""The long recipe of ``benchmarks/recipes.py``: GPT-2 small trained from scratch on real Python source code.

Long enough (about ten minutes of the Transformers Trainer on an H100) for ``torch.compile`` to earn
its cost back, which the short recipes never do. It follows the Transformers course's "train a causal
language model from scratch" (CodeParrot) and ``run_clm``: a byte-level BPE tokenizer trained on the
corpus, the text concatenated and cut into blocks of 1,024 tokens, GPT-2 small (12 layers, 768 wide),
batch 8, AdamW at lr 5e-4 with 200 warmup steps then linear decay, clipping at 1.0, a fixed number of
optimizer steps (pretraining is counted in steps), and the perplexity on 256 held-out blocks.

The corpus is the ``.py`` files of this Python's standard library and of the installed ``torch`` and
``transformers`` packages (about 140 MB of text): real text of real, varied lengths that every machine
with these packages has. It differs between versions, so compare runs within one table.

The tokenizer and the token ids are made once, before the timed runs, and cached (as ``run_clm``'s
``datasets`` cache does on its second run); every runner then loads the same ids. ``prepare`` reports
how long that took.
"""

from __future__ import annotations

import json
import math
import sys
import sysconfig
import time
from pathlib import Path

BLOCK = 1024
BATCH = 8
EVAL_BLOCKS = 256
LEARNING_RATE = 5e-4
WARMUP = 200
VOCAB = 32768
DEFAULT_STEPS = 7500


def corpus_files() -> list[Path]:
    """The ``.py`` files of the standard library and of torch and transformers, in a fixed order."""
    import torch
    import transformers

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    roots = [stdlib, Path(torch.__file__).parent, Path(transformers.__file__).parent]
    files = []
    for root in roots:
        files += sorted(p for p in root.rglob("*.py")
                        if root != stdlib or not {"site-packages", "dist-packages"} & set(p.parts))
    return files


def prepare(cache: Path, files: int = 0) -> dict:
    """Train the tokenizer and write the token ids (``tokens.npy``) once; later calls read the cache.

    ``files``: use only every n-th file, n chosen to keep about this many (a quick check; 0: all).
    """
    meta_path = cache / "meta.json"
    if meta_path.exists():
        return json.loads(meta_path.read_text())
    import os

    import numpy
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    os.environ["TOKENIZERS_PARALLELISM"] = "true"  # the children turn it off; here it is one job
    started = time.perf_counter()
    paths = corpus_files()
    paths = paths[:: max(1, len(paths) // files)] if files else paths
    texts = [path.read_text(encoding="utf-8", errors="replace") for path in paths]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer=trainer)
    trained = time.perf_counter()
    end = tokenizer.token_to_id("<|endoftext|>")
    ids = numpy.concatenate([numpy.asarray([*encoding.ids, end], dtype=numpy.int32)
                             for encoding in tokenizer.encode_batch(texts)])  # an end token after every file
    cache.mkdir(parents=True, exist_ok=True)
    numpy.save(cache / "tokens.npy", ids)
    tokenizer.save(str(cache / "tokenizer.json"))
    meta = {"files": len(texts), "characters": sum(map(len, texts)), "tokens": len(ids), "vocab": VOCAB,
            "end_token": end, "tokenizer_seconds": round(trained - started, 1),
            "tokenize_seconds": round(time.perf_counter() - trained, 1), "python": sys.version.split()[0]}
    meta_path.write_text(json.dumps(meta, indent=1))
    return meta


def _blocks(cache: Path):
    """(train blocks, held-out blocks): the ids cut into rows of BLOCK, split by a fixed permutation."""
    import numpy
    import torch

    ids = torch.from_numpy(numpy.load(cache / "tokens.npy")).long()
    blocks = ids[: len(ids) // BLOCK * BLOCK].view(-1, BLOCK)
    order = torch.randperm(len(blocks), generator=torch.Generator().manual_seed(0))
    held_out = min(EVAL_BLOCKS, len(blocks) // 10)  # a sampled corpus (--gpt2-files) keeps 90% for training
    return blocks[order[held_out:]], blocks[order[:held_out]]


def _model(args):
    """GPT-2 small (a 2-layer, 64-wide one with --gpt2-tiny, to check the script on a CPU)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    meta = json.loads((Path(args.gpt2_cache) / "meta.json").read_text())
    torch.manual_seed(0)
    size = {"n_layer": 2, "n_embd": 64, "n_head": 2} if args.gpt2_tiny else {}
    # use_cache off, as both Trainers set it before training (Transformers' TrainingArguments.use_cache=False): a
    # training forward with it on also returns every layer's keys and values, which costs the bare loop memory and time
    config = GPT2Config(vocab_size=meta["vocab"], n_positions=BLOCK, bos_token_id=meta["end_token"],
                        eos_token_id=meta["end_token"], use_cache=False, **size)
    return GPT2LMHeadModel(config)


class _Blocks:
    """Rows of token ids as a map-style dataset of {input_ids, labels} (run_clm's labels = input_ids)."""

    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        return {"input_ids": self.rows[index], "labels": self.rows[index]}


def _steps(args) -> int:
    return args.max_steps or args.gpt2_steps or DEFAULT_STEPS


# -- the floor: a bare loop, compiled, as a user who writes one for a long run would ----------------------
def bare(args) -> None:
    started = time.perf_counter()
    import torch

    from recipes import _device, _report

    cache = Path(args.gpt2_cache)
    device, dtype = _device(args.cpu)
    train, held_out = _blocks(cache)
    model = _model(args).to(device)
    train = train.to(device)
    data_done = time.perf_counter()
    steps = _steps(args)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.0,
                                  fused=device.type == "cuda")
    scheduler = torch.optim.lr_scheduler.LambdaLR(  # Transformers' linear schedule with warmup
        optimizer, lambda s: s / WARMUP if s < WARMUP else max(0.0, (steps - s) / (steps - WARMUP)))
    forward = torch.compile(model) if device.type == "cuda" else model
    generator = torch.Generator().manual_seed(42)

    def batches():  # reshuffled every pass over the blocks
        while True:
            order = torch.randperm(len(train), generator=generator).to(device)
            for start in range(0, len(train) - BATCH + 1, BATCH):
                yield train[order[start:start + BATCH]]

    model.train()
    for _step, rows in zip(range(steps), batches()):
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = forward(input_ids=rows, labels=rows).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize() if device.type == "cuda" else None
    eval_started = time.perf_counter()
    value = _perplexity(model, held_out, device, dtype)
    done = time.perf_counter()
    _report(started, training_seconds=eval_started - data_done, eval_seconds=done - eval_started,
            setup_seconds=data_done - started, data_seconds=data_done - started, metric="perplexity",
            value=value, steps=steps)


def _perplexity(model, held_out, device, dtype) -> float:
    import torch

    model.eval()
    losses = []
    with torch.no_grad(), torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
        for start in range(0, len(held_out), 16):
            rows = held_out[start:start + 16].to(device)
            losses.append(float(model(input_ids=rows, labels=rows).loss) * len(rows))
    return math.exp(sum(losses) / len(held_out))


# -- the Transformers Trainer, and braeburn's ---------------------------------------------------------
def _data_and_model(args):
    """(train blocks, held-out blocks, the fresh model, when the data was ready) for a Trainer runner."""
    train, held_out = _blocks(Path(args.gpt2_cache))
    model = _model(args)
    return train, held_out, model, time.perf_counter()


def transformers(args) -> None:
    started = time.perf_counter()
    from transformers import Trainer

    from recipes import _hf_args, _train_trainer_and_report

    train, held_out, model, data_done = _data_and_model(args)
    hf_args = _hf_args(args, args.workdir, 1, LEARNING_RATE, per_device_train_batch_size=BATCH,
                       per_device_eval_batch_size=16, warmup_steps=WARMUP, max_steps=_steps(args))
    trainer = Trainer(model=model, args=hf_args, train_dataset=_Blocks(train), eval_dataset=_Blocks(held_out))
    _train_trainer_and_report(started, data_done, trainer, "perplexity", lambda m: math.exp(m["eval_loss"]))


def braeburn(args) -> None:
    """As a braeburn user writes it: the Trainer with its defaults (checkpoints, plot, compile=auto)."""
    started = time.perf_counter()
    from braeburn import Trainer, TrainingConfig
    from recipes import _overrides, _train_trainer_and_report

    train, held_out, model, data_done = _data_and_model(args)
    config = TrainingConfig(output_dir=args.workdir, overwrite_output_dir=True, per_device_train_batch_size=BATCH,
                            per_device_eval_batch_size=16, learning_rate=LEARNING_RATE, warmup_steps=WARMUP,
                            max_steps=_steps(args), use_cpu=args.cpu, **_overrides(args))
    trainer = Trainer(model, config, train_dataset=_Blocks(train), eval_dataset=_Blocks(held_out))
    _train_trainer_and_report(started, data_done, trainer, "perplexity", lambda m: math.exp(m["eval_loss"]))
