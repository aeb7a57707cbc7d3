"""`braeburn check`: the CLI end to end on the CPU (both sides CPU), and its comparison logic."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import Counter

import pytest

from braeburn.cli import check
from braeburn.cli.main import main

# A user's script: it knows nothing of `check`, except (for these tests) how to misbehave on the
# "accelerator" side only, as a wrong kernel or a missing op would.
SCRIPT = textwrap.dedent('''
    import os, sys, warnings
    import torch
    from braeburn import Accelerator

    accelerator_side = os.environ.get("BRAEBURN_CHECK_SIDE") == "accelerator"
    torch.manual_seed(0)
    x = torch.randn(128, 10)
    y = (x.sum(1, keepdim=True) > 0).float()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                torch.nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    accelerator = Accelerator()
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    scale = 1.05 if accelerator_side and "--perturb" in sys.argv else 1.0
    if accelerator_side and "--wrong-grad" in sys.argv:  # a backward kernel 5% off for one weight
        model[0].weight.register_hook(lambda grad: grad * 1.05)
    for step, (xb, yb) in enumerate(loader):
        if accelerator_side and "--fallback" in sys.argv:
            warnings.warn("The operator 'aten::_linalg_eigh' is not currently supported on the MPS backend and "
                          "will fall back to run on the CPU. This may have performance implications.")
        if accelerator_side and "--missing-op" in sys.argv and step == 1:
            raise NotImplementedError("The operator 'aten::_fft_r2c' is not currently implemented for the MPS "
                                      "device. If you want this op to be considered for addition please comment")
        hidden = model[0](xb) * scale  # the "kernel" that is wrong on one side
        out = model[3](model[2](model[1](hidden)))
        loss = torch.nn.functional.binary_cross_entropy_with_logits(out, yb)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
''')


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


def _check(*args) -> tuple[int, dict | str]:
    done = subprocess.run([sys.executable, "-m", "braeburn.cli.main", "check", *map(str, args)],
                          capture_output=True, text=True, timeout=120)
    output = done.stdout
    if "--json" in args and output.strip():
        output = json.loads(output)
    return done.returncode, output if output else done.stderr


@pytest.mark.slow  # braeburn check runs the script twice as subprocesses (43 s on a loaded machine)
def test_cpu_against_cpu_passes_with_identical_numbers(script):
    code, report = _check("--steps", 3, "--accelerator", "cpu", "--json", script)
    assert code == 0, report
    assert report["passed"] and report["device"] == "cpu" and report["precision"] == "no"
    assert [row["step"] for row in report["steps"]] == [1, 2, 3]
    assert all(row["loss_rel"] == 0.0 and row["grad_max_rel"] == 0.0 for row in report["steps"])
    assert report["dropout_disabled"] == ["2"]
    assert report["step_seconds"]["reference"] > 0 and report["step_seconds"]["accelerator"] > 0
    assert report["timed_steps"] == 2 and report["speedup"] is None  # too few timed steps for a speed verdict


@pytest.mark.slow  # braeburn check runs the script twice as subprocesses (12-41 s)
def test_a_wrong_gradient_kernel_fails_names_the_parameter_and_fallbacks_are_counted(script):
    code, report = _check("--steps", 3, "--accelerator", "cpu", "--json", script, "--wrong-grad", "--fallback")
    assert code == 1, report
    assert not report["passed"] and all(not row["ok"] for row in report["steps"])
    assert report["steps"][0]["grad_max_rel"] == pytest.approx(0.05, rel=1e-3)
    assert report["steps"][0]["worst"] == "0.weight" and report["steps"][0]["loss_rel"] == 0.0
    assert report["worst_parameters"][0][0] == "0.weight"
    assert report["fallback_ops"] == {"aten::_linalg_eigh": 1}  # Python shows a warning once per place


@pytest.mark.slow  # braeburn check runs the script twice as subprocesses (17-45 s)
def test_an_op_missing_on_the_accelerator_fails_and_is_named(script):
    code, report = _check("--steps", 3, "--accelerator", "cpu", "--json", script, "--missing-op")
    assert code == 1
    assert report["failed_ops"] and "aten::_fft_r2c" in report["failed_ops"][0]
    assert any("accelerator run (cpu) failed" in failure for failure in report["failures"])
    assert len(report["steps"]) == 1  # the step before the failure was still compared


@pytest.mark.slow  # braeburn check runs the script as a subprocess (17 s)
def test_a_script_without_braeburn_is_a_usage_error(tmp_path):
    plain = tmp_path / "plain.py"
    plain.write_text("import torch\nprint(torch.ones(2).sum())\n")
    code, message = _check("--accelerator", "cpu", plain)
    assert code == 2 and "never reached an optimizer step" in message


def test_usage_errors_say_what_was_passed(tmp_path, capsys):
    assert main(["check", str(tmp_path / "missing.py")]) == 2
    assert "missing.py' does not exist" in capsys.readouterr().err
    script = tmp_path / "s.py"
    script.write_text("")
    assert main(["check", "--tolerance", "loss=abc", str(script)]) == 2
    assert "loss=abc" in capsys.readouterr().err
    assert main(["check", "--accelerator", "tpu", str(script)]) == 2
    assert "unknown accelerator" in capsys.readouterr().err


def test_a_timeout_of_zero_is_a_usage_error_named_with_the_other_option_errors(tmp_path, capsys):
    script = tmp_path / "s.py"
    script.write_text("")
    assert main(["check", "--timeout", "0", str(script)]) == 2
    err = capsys.readouterr().err
    assert "--timeout 0:" in err and "above 0" in err and "--timeout 600" in err
    assert main(["check", "--timeout", "-5", "--steps", "0", "--tolerance", "loss=abc", "--accelerator", "tpu",
                 str(tmp_path / "missing.py")]) == 2
    err = capsys.readouterr().err
    assert "5 problems with the options" in err
    for words in ("missing.py' does not exist", "--steps 0", "--timeout -5", "loss=abc", "unknown accelerator"):
        assert words in err, words


def test_too_few_timed_steps_give_no_speed_verdict_and_say_how_to_get_one():
    reference = _timed("reference", "cpu", [9.0, 0.40, 0.42])
    accelerator = _timed("accelerator", "mps", [9.0, 0.10, 0.11], "bf16")
    report = check.build_report("t.py", reference, accelerator, "")
    assert report["timed_steps"] == 2 and report["speedup"] is None and report["speedup_range"] is None
    line = check._timing_line(report, "cpu")
    assert "faster" not in line and "slower" not in line and "no clear difference" not in line
    assert "no speed verdict: 2 steps timed on each side" in line and "pass --steps 4 or more" in line
    one = check._timing_line(check.build_report("t.py", _timed("reference", "cpu", [0.4]),
                                                _timed("accelerator", "mps", [0.1]), ""), "cpu")
    assert "no speed verdict: 1 step timed on each side" in one


def test_tolerances_follow_the_precision_and_can_be_overridden():
    assert check.parse_tolerance("", "no") == check.TOLERANCES["no"]
    assert check.parse_tolerance("", "bf16")[1] > check.parse_tolerance("", "no")[1]
    assert check.parse_tolerance("grad=0.2", "no") == (check.TOLERANCES["no"][0], 0.2)
    with pytest.raises(ValueError, match="grad=NUMBER"):
        check.parse_tolerance("grad=-1", "no")


def test_stderr_parsing_finds_fallback_ops_and_failed_ops():
    stderr = textwrap.dedent('''
        /x/train.py:12: UserWarning: The operator 'aten::nonzero' is not currently supported on the MPS backend and will fall back to run on the CPU. This may have performance implications.
        /x/train.py:30: UserWarning: The operator 'aten::nonzero' is not currently supported on the MPS backend and will fall back to run on the CPU. This may have performance implications.
        Traceback (most recent call last):
        NotImplementedError: The operator 'aten::_fft_r2c' is not currently implemented for the MPS device.
    ''')
    run = check.SideRun("accelerator", "mps", 1, None, stderr)
    check.read_stderr(run)
    assert run.fallback_ops == Counter({"aten::nonzero": 2})
    assert run.failed_ops == ["The operator 'aten::_fft_r2c' is not currently implemented for the MPS device."]
    assert run.error.startswith("NotImplementedError")


def test_float64_use_is_a_failure_only_for_a_device_without_float64():
    reference = check.SideRun("reference", "cpu", 0, {"float64": ["loss is float64"],
                                                      "float64_ops": {"Tensor.double": 3}}, "")
    on_mps = check.float64_findings(reference, check.SideRun("accelerator", "mps", 0, {}, ""))
    assert on_mps == ["loss is float64", "Tensor.double made a float64 tensor (3x in step 1)"]
    assert check.float64_findings(reference, check.SideRun("accelerator", "cuda", 0, {}, "")) == []


def _side(side, device, steps, precision="no"):
    return check.SideRun(side, device, 0, {"precision": precision, "steps": steps, "stopped_by_check": True}, "")


def test_verdict_and_speedup_from_records():
    reference = _side("reference", "cpu", [{"step": s, "loss": 1.0, "time_s": 0.4} for s in (1, 2, 3, 4)])
    steps = [{"step": s, "loss": 1.01, "time_s": 0.1,
              "grad": {"max_rel": 0.05, "worst": [["fc.weight", 0.05]], "nonfinite": []}} for s in (1, 2, 3, 4)]
    report = check.build_report("t.py", reference, _side("accelerator", "mps", steps, "bf16"), "")
    assert report["passed"] and report["speedup"] == pytest.approx(4.0)
    strict = check.build_report("t.py", reference, _side("accelerator", "mps", steps, "no"), "")
    assert not strict["passed"] and strict["worst_parameters"] == [("fc.weight", 0.05)]


def test_rich_report_names_the_failure_and_the_faster_device(capsys):
    reference = _side("reference", "cpu", [{"step": s, "loss": 1.0, "time_s": 0.001} for s in (1, 2, 3, 4)])
    steps = [{"step": s, "loss": 1.2, "time_s": 0.004,
              "grad": {"max_rel": 0.3, "worst": [["encoder.0.weight", 0.3]], "nonfinite": []}} for s in (1, 2, 3, 4)]
    accelerator = _side("accelerator", "mps", steps)
    accelerator.fallback_ops = Counter({"aten::nonzero": 2})
    check.render(check.build_report("t.py", reference, accelerator, ""), "cpu")
    text = " ".join(capsys.readouterr().out.split())  # undo the console's line wrapping
    assert "FAIL" in text and "encoder.0.weight" in text and "aten::nonzero (2x)" in text
    assert "the CPU is the faster choice for this script (4.00x faster)" in text


def _timed(side, device, times, precision="no"):
    return _side(side, device, [{"step": i + 1, "loss": 1.0, "time_s": t} for i, t in enumerate(times)], precision)


def test_a_speed_difference_inside_the_steps_spread_is_no_clear_difference():
    """The same check said 5.20x faster, 2.64x faster and 155x slower in three runs; a ratio the steps'
    own spread covers is reported as no clear difference, with the range."""
    reference = _timed("reference", "cpu", [9.0, 0.010, 0.020, 0.012, 0.030])
    accelerator = _timed("accelerator", "cpu", [9.0, 0.011, 0.025, 0.009, 0.014], "bf16")
    report = check.build_report("t.py", reference, accelerator, "")
    low, high = report["speedup_range"]
    assert low < 1 < high and report["timed_steps"] == 4
    line = check._timing_line(report, "cpu")
    assert "no clear difference" in line and "4 steps each" in line and f"{low:.2f}x-{high:.2f}x" in line


def test_a_speed_difference_beyond_the_spread_is_named_with_its_range():
    reference = _timed("reference", "cpu", [9.0, 0.40, 0.42, 0.41])
    accelerator = _timed("accelerator", "mps", [9.0, 0.10, 0.11, 0.10], "bf16")
    line = check._timing_line(check.build_report("t.py", reference, accelerator, ""), "cpu")
    assert "4.10x faster" in line and "3.64x-4.20x" in line and "no clear difference" not in line


ACCUMULATING_SCRIPT = textwrap.dedent('''
    import os, sys
    import torch
    from braeburn import Accelerator

    torch.manual_seed(0)
    x, y = torch.randn(64, 8), torch.randint(0, 2, (64,))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
    model = torch.nn.Linear(8, 2)
    accelerator = Accelerator(gradient_accumulation_steps=2)
    model, optimizer, loader = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), loader)
    with open(sys.argv[1], "a") as written:
        for xb, yb in loader:
            with accelerator.accumulate(model):
                loss = torch.nn.functional.cross_entropy(model(xb), yb)
                written.write(f"{os.environ['BRAEBURN_CHECK_SIDE']} {loss.item()!r}\\n")
                written.flush()
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
''')


@pytest.mark.slow  # braeburn check runs the script twice as subprocesses (11-31 s)
def test_the_loss_shown_is_the_scripts_loss_with_gradient_accumulation(tmp_path):
    """With gradient_accumulation_steps=2 each step's loss is the mean of the two micro-batch losses the script
    computed, not that divided by the accumulation steps."""
    script, losses = tmp_path / "accumulating.py", tmp_path / "losses.txt"
    script.write_text(ACCUMULATING_SCRIPT)
    code, report = _check("--steps", 2, "--accelerator", "cpu", "--json", script, losses)
    assert code == 0, report
    written = [float(line.split()[1]) for line in losses.read_text().splitlines() if line.startswith("reference")]
    expected = [(written[0] + written[1]) / 2, (written[2] + written[3]) / 2]
    assert [row["reference_loss"] for row in report["steps"]] == pytest.approx(expected, rel=1e-6)
    assert [row["loss"] for row in report["steps"]] == pytest.approx(expected, rel=1e-6)
    assert 0.4 < expected[0] < 1.2  # a fresh 2-class model: about ln 2, not half of it


def test_the_loss_and_time_columns_name_which_run_is_which(capsys):
    reference = _side("reference", "cpu", [{"step": s, "loss": 0.69, "time_s": 0.01} for s in (1, 2)])
    steps = [{"step": s, "loss": 0.69, "time_s": 0.01, "grad": {"max_rel": 0.0, "worst": [], "nonfinite": []}}
             for s in (1, 2)]
    report = check.build_report("t.py", reference, _side("accelerator", "cpu", steps), "")
    table = check._steps_table(report, "cpu")
    titles = [column.header for column in table.columns]
    assert titles[1:3] == ["loss cpu (float32)", "loss reference"]
    assert table.title == "Per step: cpu (float32) against cpu (float32, reference)"
    assert "cpu (float32, reference) 10.00 ms" in check._timing_line(report, "cpu")
