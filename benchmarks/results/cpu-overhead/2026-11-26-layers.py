import contextlib, io, statistics, sys, tempfile, time
sys.path.insert(0, "benchmarks")
import torch
torch.set_num_threads(1)
import cpu_overhead as co
from braeburn import Trainer, TrainingConfig
from braeburn.trainer.loop import CoreTrainer
from braeburn.trainer.config import CoreTrainingConfig
co.clock = time.process_time

def runner(cls, cfg_cls, **extra):
    def run(steps):
        net, dataset = co.model(), co.data(steps)
        with tempfile.TemporaryDirectory() as folder:
            opts = dict(output_dir=f"{folder}/out", per_device_train_batch_size=co.BATCH, learning_rate=1e-3,
                        num_train_epochs=1, logging_steps=50, save_strategy="no", use_cpu=True)
            opts.update(extra)
            config = cfg_cls(**opts)
            with contextlib.redirect_stdout(io.StringIO()):
                t = cls(net, config, train_dataset=dataset, loss_fn=torch.nn.functional.cross_entropy)
                s = time.process_time(); t.train(); return time.process_time() - s
    return run

runners = {"bare": co.bare, "public": runner(Trainer, TrainingConfig),
           "public-nolog": runner(Trainer, TrainingConfig, logging_steps=10**6),
           "public-nofreeze": runner(Trainer, TrainingConfig, freeze_heap=False),
           "core": runner(CoreTrainer, CoreTrainingConfig)}
for r in runners.values(): r(120)
rates = {k: [] for k in runners}
for _ in range(5):
    for k, r in runners.items():
        rates[k].append(co.marginal_rate(r, 300))
b = statistics.median(rates["bare"])
for k, v in rates.items():
    m = statistics.median(v); print(f"{k:16s} {m:8.1f} {m/b:.3f}  us/step over bare {1e6/m - 1e6/b:7.1f}  {[round(x) for x in v]}")
