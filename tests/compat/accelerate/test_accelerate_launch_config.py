"""`braeburn launch` takes what `accelerate launch` takes: an `accelerate config` file (--config_file x.yaml) and
--multi_gpu. Accelerate's own config writer makes the files, Accelerate's own launcher reads them, and braeburn
must come to the same processes, machines, precision, device and compile; what it cannot honour is listed, key by
key with the fix (and the value, for the settings braeburn reads), in one error."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from braeburn.cli.launch import plan_launch, resolve_multi_gpu
from braeburn.cli.main import main
from braeburn.cli.launch_config import ConfigError, resolve_settings
from tests.conftest import CUDA_BOX, LINUX_CPU

# (name, ClusterConfig fields, the host braeburn plans on)
ACCELERATE_FILES = [
    ("one_cpu_process", dict(distributed_type="NO", mixed_precision="no", use_cpu=True, num_processes=1), LINUX_CPU),
    ("two_cpu_processes", dict(distributed_type="MULTI_CPU", mixed_precision="no", use_cpu=True, num_processes=2),
     LINUX_CPU),
    ("two_gpus_bf16_compiled", dict(distributed_type="MULTI_GPU", mixed_precision="bf16", use_cpu=False,
                                    num_processes=2, gpu_ids="0,1", dynamo_config={"dynamo_backend": "INDUCTOR"}),
     CUDA_BOX),
    ("second_of_two_machines", dict(distributed_type="MULTI_GPU", mixed_precision="fp16", use_cpu=False,
                                    num_processes=4, num_machines=2, machine_rank=1, main_process_ip="10.0.0.1",
                                    main_process_port=29501, same_network=True), CUDA_BOX),
]


def _written_by_accelerate(tmp_path, name, fields):
    config_args = pytest.importorskip("accelerate.commands.config.config_args",
                                      reason="Accelerate writes the config files compared here")
    path = tmp_path / f"{name}.yaml"
    config_args.ClusterConfig(compute_environment="LOCAL_MACHINE", debug=False, **fields).to_yaml_file(str(path))
    return path


def _as_accelerate_launches(path) -> dict:
    launch = pytest.importorskip("accelerate.commands.launch")
    args = launch.launch_command_parser().parse_args(["--config_file", str(path), "train.py"])
    args = launch._validate_launch_command(args)[0]
    return {"num_processes": args.num_processes, "num_machines": args.num_machines, "machine_rank": args.machine_rank,
            "main_process_ip": args.main_process_ip, "main_process_port": args.main_process_port,
            "mixed_precision": args.mixed_precision, "cpu": bool(args.use_cpu), "multi_gpu": bool(args.multi_gpu),
            "gpu_ids": args.gpu_ids, "compile": str(args.dynamo_backend).lower() == "inductor"}


def _as_braeburn_launches(path, host) -> dict:
    resolved = resolve_multi_gpu(resolve_settings({}, {}, path), host)
    plan = plan_launch(resolved, host, env={})
    s = resolved.settings
    assert plan.device.name == ("cpu" if s.cpu else "cuda")
    assert plan.strategy == ("ddp" if s.num_processes > 1 else "single")
    return {"num_processes": s.num_processes, "num_machines": s.num_machines, "machine_rank": s.machine_rank,
            "main_process_ip": s.main_process_ip, "main_process_port": s.main_process_port,
            "mixed_precision": s.mixed_precision, "cpu": s.cpu, "multi_gpu": s.multi_gpu, "gpu_ids": s.gpu_ids,
            "compile": s.compile is True}


@pytest.mark.parametrize("name, fields, host", ACCELERATE_FILES, ids=[case[0] for case in ACCELERATE_FILES])
def test_an_accelerate_config_file_means_what_it_means_to_accelerate(tmp_path, clean_env, name, fields, host):
    path = _written_by_accelerate(tmp_path, name, fields)
    assert _as_braeburn_launches(path, host) == _as_accelerate_launches(path)


def test_a_hand_written_file_with_unquoted_no_means_one_process_to_both(tmp_path, clean_env):
    """YAML 1.1 reads an unquoted NO as false: Accelerate runs one process, braeburn said "cannot run False"."""
    path = tmp_path / "by_hand.yaml"
    path.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: NO\nmixed_precision: 'no'\n"
                    "use_cpu: true\nnum_processes: 1\n")
    assert _as_braeburn_launches(path, LINUX_CPU) == _as_accelerate_launches(path)


def _accelerate_starts(path) -> list[str]:
    """The command `accelerate launch --config_file path train.py` runs: its launcher chosen as Accelerate chooses
    it (launch_command), and that launcher's command; torchrun's is several processes, the simple one's is one."""
    launch = pytest.importorskip("accelerate.commands.launch")
    from accelerate.utils.launch import prepare_simple_launcher_cmd_env

    args = launch.launch_command_parser().parse_args(["--config_file", str(path), "train.py"])
    chosen = []
    with pytest.MonkeyPatch.context() as patch:
        for name in ("simple_launcher", "multi_gpu_launcher", "deepspeed_launcher", "tpu_launcher"):
            patch.setattr(launch, name, lambda a, name=name: chosen.append((name, a)))
        launch.launch_command(args)
    [(name, args)] = chosen
    if name != "simple_launcher":
        return ["torchrun", "--nproc_per_node", str(args.num_processes // args.num_machines)]
    return prepare_simple_launcher_cmd_env(args)[0]


@pytest.mark.parametrize("distributed_type", ["NO", "'NO'"])
@pytest.mark.parametrize("use_cpu", ["use_cpu: true\n", ""])
def test_distributed_type_no_with_two_processes_runs_one_as_accelerate_does(tmp_path, clean_env, capsys,
                                                                           distributed_type, use_cpu):
    """braeburn ran 2 processes with DDP; Accelerate's launcher runs the script once."""
    path = tmp_path / "no.yaml"
    path.write_text(f"compute_environment: LOCAL_MACHINE\ndistributed_type: {distributed_type}\n"
                    f"mixed_precision: 'no'\nnum_processes: 2\n{use_cpu}")
    assert _accelerate_starts(path) == [sys.executable, "train.py"]  # one process
    resolved = resolve_settings({}, {}, path)
    assert resolved.settings.num_processes == 1 and resolved.problems == []
    assert plan_launch(resolved, LINUX_CPU, env={}).strategy == "single"
    [note] = resolved.notes
    assert str(note).startswith(f"{path}: num_processes = 2: not used: distributed_type NO runs one process")
    (tmp_path / "t.py").write_text("")
    assert main(["launch", "--config_file", str(path), "--dry-run", str(tmp_path / "t.py")]) == 0
    said = capsys.readouterr()
    assert said.out.splitlines()[0] == f"{sys.executable} {tmp_path / 't.py'}"  # no torchrun
    assert f"braeburn launch: note: {path}: num_processes = 2: not used" in said.err
    # a flag still wins over the file, as every flag does
    assert resolve_settings({"num_processes": "2"}, {}, path).settings.num_processes == 2


def test_the_basic_config_accelerate_writes_is_accepted(tmp_path, clean_env):
    utils = pytest.importorskip("accelerate.utils", reason="Accelerate writes the config file")
    path = tmp_path / "default_config.yaml"
    utils.write_basic_config(mixed_precision="no", save_location=str(path))
    assert _as_braeburn_launches(path, LINUX_CPU) == _as_accelerate_launches(path)


TWO_CPU_PROCESSES = """\
compute_environment: LOCAL_MACHINE
debug: false
distributed_type: MULTI_CPU
downcast_bf16: 'no'
enable_cpu_affinity: false
gpu_ids: all
machine_rank: 0
main_training_function: main
mixed_precision: 'no'
num_machines: 1
num_processes: 2
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: true
"""

ALL_REDUCE = textwrap.dedent("""
    import os, torch, torch.distributed as dist
    dist.init_process_group("gloo")
    t = torch.tensor([dist.get_rank() + 1.0])
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()} of {dist.get_world_size()}: sum={t.item():.0f} "
          f"precision={os.environ['BRAEBURN_MIXED_PRECISION']} compile={os.environ['BRAEBURN_COMPILE']}", flush=True)
    dist.destroy_process_group()
""")


@pytest.mark.slow
def test_launch_runs_two_processes_from_an_accelerate_file(tmp_path, clean_env):
    config = tmp_path / "default_config.yaml"
    config.write_text(TWO_CPU_PROCESSES)
    script = tmp_path / "all_reduce.py"
    script.write_text(ALL_REDUCE)
    done = subprocess.run([sys.executable, "-m", "braeburn.cli.main", "launch", "--config_file", str(config),
                           "--every-process-prints", str(script)], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    for rank in (0, 1):  # Accelerate's defaults for what the file leaves out: float32, no torch.compile
        assert f"rank {rank} of 2: sum=3 precision=no compile=false" in done.stdout


def test_everything_braeburn_cannot_honour_is_one_error(tmp_path, clean_env, capsys):
    config = tmp_path / "deepspeed.yaml"
    config.write_text(textwrap.dedent("""\
        compute_environment: LOCAL_MACHINE
        debug: true
        distributed_type: DEEPSPEED
        deepspeed_config:
          zero_stage: 2
        mixed_precision: fp8
        num_processes: 2
        rdzv_backend: c10d
        tpu_env: []
        main_training_function: main
        """))
    (tmp_path / "t.py").write_text("print('hi')\n")
    assert main(["launch", "--config_file", str(config), "--dry-run", str(tmp_path / "t.py")]) == 1
    error = capsys.readouterr().err
    assert "5 problems" in error
    for line in ("debug: braeburn has no collective-checking debug mode",  # a table's value is never shown
                 "distributed_type = 'DEEPSPEED': braeburn cannot run DEEPSPEED",
                 "deepspeed_config: braeburn has no DeepSpeed",
                 "mixed_precision = 'fp8': braeburn has no fp8 training. Fix: write mixed_precision: bf16",
                 "rdzv_backend = 'c10d'"):
        assert f"{config}: {line}" in error


def test_num_processes_minus_one_asks_for_the_flag_as_accelerate_does(tmp_path, clean_env):
    config = tmp_path / "slurm.yaml"
    config.write_text(TWO_CPU_PROCESSES.replace("num_processes: 2", "num_processes: -1"))
    with pytest.raises(ConfigError, match="num_processes = -1: .*Fix: pass --num-processes N"):
        resolve_settings({}, {}, config).raise_for_problems()
    resolved = resolve_settings({"num_processes": "4"}, {}, config)
    assert not resolved.problems and resolved.settings.num_processes == 4


@pytest.mark.parametrize("flags, processes", [([], 2), (["--num_processes", "1"], 1), (["--gpu_ids", "1"], 1)])
def test_multi_gpu_is_one_process_per_gpu(tmp_path, clean_env, capsys, fake_host, flags, processes):
    fake_host("cuda")  # two GPUs
    (tmp_path / "t.py").write_text("print('hi')\n")
    assert main(["launch", "--multi_gpu", *flags, "--dry-run", str(tmp_path / "t.py")]) == 0
    out = capsys.readouterr().out
    assert "BRAEBURN_DEVICE=cuda" in out
    assert (f"--nproc-per-node {processes}" in out) if processes > 1 else ("job_agent" not in out)


def test_multi_gpu_without_gpus_names_the_flag_and_the_fix(tmp_path, clean_env, capsys, fake_host):
    fake_host("linux_cpu")
    (tmp_path / "t.py").write_text("print('hi')\n")
    assert main(["launch", "--multi_gpu", "--dry-run", str(tmp_path / "t.py")]) == 1
    error = capsys.readouterr().err
    assert "1 problem" in error and "flag --multi-gpu: multi_gpu = True: asks for DDP on several GPUs, but this " \
        "machine has no GPU that DDP can use" in error
    assert "Fix: drop --multi_gpu and pass --cpu --num-processes N" in error
