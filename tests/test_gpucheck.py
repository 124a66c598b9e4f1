"""`make gpu-check`'s logic on CPU: the check cells train, the table shows every family with its
path, tokens/s and FLOP rate, and the failure rules fire."""
import json

import pytest

from arrepro.cluster import gpucheck


def test_cpu_check_prints_a_row_per_family(tmp_path, capsys):
    code = gpucheck.main(["--device", "cpu", "--scale", "tiny", "--steps", "10", "--width", "16", "--layers", "1",
                          "--precision", "fp32", "--only", "attention", "mamba", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    rows = json.loads((tmp_path / "table.json").read_text())
    assert [r["family"] for r in rows] == ["attention", "mamba"]
    for r in rows:
        assert r["steps"] == 10 and r["tokens_per_s"] > 0 and r["model_tflops"] > 0
        assert r["mfu"] is None and r["peak_mem_mb"] is None  # no GPU: no peak, no CUDA memory
        assert r["family"] in out and r["model"] in out
    assert "tokens/s" in out.splitlines()[-3] and "MFU" in out


def test_flops_leave_out_the_mixer_time_factor():
    from arrepro.config import costs

    spec = {"task_def": {"kind": "mqar", "seq_len": 64, "num_kv_pairs": 4, "vocab_size": 8192},
            "width": 64, "layers": 2, "model_def": {"mixer": "hyena"}}
    assert costs.MIXER_FACTOR["hyena"] > 1
    assert gpucheck.model_flops_per_token(spec) < costs.flops_per_token(spec)
    assert gpucheck.model_flops_per_token(spec) == costs.flops_per_token({**spec, "model_def": {"mixer": "attention"}})


def test_peak_table_prefers_the_more_specific_name():
    assert gpucheck.peak_tflops("NVIDIA H100 PCIe", "bf16") == 756.0
    assert gpucheck.peak_tflops("NVIDIA H100 80GB HBM3", "bf16") == 989.0
    assert gpucheck.peak_tflops("NVIDIA A100-SXM4-80GB", "fp32") == 19.5
    assert gpucheck.peak_tflops("Some GPU", "bf16") is None


def _row(family, paths, diverged=False):
    return {"family": family, "paths": paths, "diverged": diverged}


def test_problems_flag_divergence_and_portable_paths_when_kernels_are_required():
    kernel = {"op": "mamba.selective_scan_fn", "path": "kernel", "package": "mamba-ssm 2.3.1", "reason": ""}
    portable = {"op": "attention.flash_attn_func", "path": "portable", "package": None,
                "reason": "head dim 512 > flash-attn's limit 256: SDPA"}
    rows = [_row("mamba", [kernel]), _row("attention", [portable]), _row("hyena", []), _row("rwkv", [], True)]
    mixers = {"mamba", "attention"}
    assert gpucheck.problems(rows, mixers, require_kernels=False) == ["rwkv: diverged"]
    found = gpucheck.problems(rows, mixers, require_kernels=True)
    assert found[0] == "rwkv: diverged" and len(found) == 2 and "attention" in found[1] and "SDPA" in found[1]
    assert "not recorded" in gpucheck.problems([_row("mamba", None)], mixers, True)[0]


def test_bad_arguments_are_refused():
    with pytest.raises(SystemExit):
        gpucheck.main(["--device", "cpu", "--steps", "0"])
    with pytest.raises(SystemExit):
        gpucheck.main(["--device", "cpu", "--only", "nosuchmixer"])
