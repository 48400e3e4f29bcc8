"""The offline pre-warm entry point (patch 0009):
``python -m vllm.model_executor.warmup.deepseek_v4_warmup``.

* The repository's audit of the entry point's flags,
  ``python -m dsv4warmup.prewarm_audit --json``, through the real command
  line: schema, 0 missing for the default (report) configuration, exit 0;
  exit 1 once one warmed key is removed (mutation).
* The in-tree entry point has no audit (it must not import this repository's
  tooling) and exits 2 with a clear message without a GPU.
* What the entry point compiles equals, key for key, what the worker's
  start-up warmups compile (``dsv4warmup.legacy.*.warmup_keys``, driving
  the real ``kernel_warmup`` entry points) over a configuration sweep, and
  covers every key the call sites produce.
* Flags and ``config.json`` map onto the configuration as ``vllm serve``'s do.

0.26.0 is frozen: the sweep against the worker's warmups and the refusal of
each bad flag (a subprocess each) are marked ``frozen`` and run with ``make
test-frozen``; the entry point's audit and the rest stay in CI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from dsv4warmup import prewarm_audit
from dsv4warmup.legacy import mhc, sparse_mla, spec_decode

REPO = Path(__file__).resolve().parents[2]
MODULE = "vllm.model_executor.warmup.deepseek_v4_warmup"
AUDIT_MODULE = "dsv4warmup.prewarm_audit"
FIELDS = {"kernel", "runtime_keys", "warmed_keys", "missing", "wasted"}


def _tree() -> str:
    return os.environ["DSV4_VLLM_TREE"]


def _cli(
    *args: str, tooling: bool = True, module: str = MODULE
) -> subprocess.CompletedProcess[str]:
    paths = [_tree()] + ([str(REPO / "scripts")] if tooling else [])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), CUDA_VISIBLE_DEVICES="")
    return subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, env=env
    )


def _audit_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return _cli(*args, module=AUDIT_MODULE)


def _prewarm() -> Any:
    from vllm.model_executor.warmup import deepseek_v4_warmup

    return deepseek_v4_warmup


def test_audit_json_default_config_misses_nothing() -> None:
    res = _audit_cli("--json")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = json.loads(res.stdout[res.stdout.index("[") :])
    assert isinstance(rows, list) and rows
    for row in rows:
        assert FIELDS <= set(row)
        assert all(isinstance(row[f], int) for f in FIELDS - {"kernel"})
    by_kernel = {r["kernel"]: r for r in rows}
    # The report's configuration reaches these (the eagle step kernel only
    # from k = 2 on, DeepGEMM replaces the TileLang prenorm GEMM).
    for kernel in (
        "_build_c128a_topk_metadata_kernel",
        "_combine_topk_swa_indices_kernel",
        "eagle_prepare_next_token_padded_kernel",
        "eagle_prepare_inputs_padded_kernel",
        "_mtp_shared_head_rmsnorm_kernel",
        "mhc_fused_tilelang",
        "mhc_post_tilelang",
        "hc_head_fuse_tilelang",
    ):
        assert by_kernel[kernel]["runtime_keys"] > 0, kernel
    assert sum(r["missing"] for r in rows) == 0


def test_audit_table_and_flags() -> None:
    res = _audit_cli("--no-deep-gemm", "--max-num-batched-tokens", "2048")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "hc_prenorm_gemm" in res.stdout  # the 12th kernel, without DeepGEMM
    total = next(line for line in res.stdout.splitlines() if line.strip().startswith("total"))
    assert total.split()[3] == "0"  # missing


def test_entry_point_has_no_audit_and_needs_no_tooling() -> None:
    # vLLM must not import this repository's tooling: the audit is ours.
    res = _cli("--audit", tooling=False)
    assert res.returncode == 2
    assert "unrecognized arguments: --audit" in res.stderr
    assert "Traceback" not in res.stderr
    source = Path(_prewarm().__file__).read_text()
    assert "dsv4warmup" not in source


def test_warming_needs_a_gpu() -> None:
    res = _cli(tooling=False)
    assert res.returncode == 2
    assert "CUDA GPU" in res.stderr


def test_audit_fails_when_one_key_is_not_warmed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    prewarm = _prewarm()
    launches = prewarm.triton_launches

    def one_short(cfg: Any) -> list[Any]:
        todo = launches(cfg)
        c128a = [i for i, x in enumerate(todo) if x.kernel_name.startswith("_build_c128a")]
        return todo[: c128a[0]] + todo[c128a[0] + 1 :]

    monkeypatch.setattr(prewarm, "triton_launches", one_short)
    assert prewarm_audit.main(["--json"]) == 1
    rows = json.loads(capsys.readouterr().out)
    missing = {r["kernel"]: r["missing"] for r in rows if r["missing"]}
    assert missing == {"_build_c128a_topk_metadata_kernel": 1}


SWEEP = {
    "flash": {},
    "flash-k2-8k": {"num_speculative_tokens": 2, "max_model_len": 8192, "max_num_seqs": 64},
    "flash-k3-1m": {"num_speculative_tokens": 3, "max_model_len": 1 << 20, "max_num_seqs": 17},
    "pro-148sm-no-deepgemm": {
        "hidden_size": 7168,
        "index_topk": 1024,
        "num_sms": 148,
        "use_deep_gemm": False,
        "max_num_batched_tokens": 2048,
    },
    "no-spec-decode": {"speculative_method": None, "num_speculative_tokens": 0},
    "deepseek-mtp-hc-eps": {
        "speculative_method": "deepseek_mtp",
        "hc_eps": 1e-5,
        "hc_sinkhorn_iters": 10,
        "max_num_batched_tokens": 2048,
    },
}


@pytest.mark.frozen
@pytest.mark.parametrize("name", list(SWEEP))
def test_prewarm_equals_worker_warmup_and_covers_call_sites(name: str) -> None:
    cfg = _prewarm().DeepseekV4WarmupConfig(**SWEEP[name])
    warmed = prewarm_audit.warmed_keys(cfg)
    # The worker's start-up warmups for the same configuration.
    resolved = prewarm_audit._device_facts(cfg)
    serving = prewarm_audit.serving_config(resolved)
    worker: dict[str, set[Any]] = {}
    worker.update(spec_decode.warmup_keys(serving))
    worker.update(sparse_mla.warmup_keys(serving))
    worker.update(mhc.warmup_keys(serving, deep_gemm=resolved.use_deep_gemm))
    kernels = {k for k in set(worker) | set(warmed) if worker.get(k) or warmed.get(k)}
    for kernel in sorted(kernels):
        assert set(warmed.get(kernel, ())) == set(worker.get(kernel, ())), kernel
    rows = prewarm_audit.audit_rows(cfg)
    assert [r.kernel for r in rows if r.missing] == []
    if not cfg.uses_mtp:
        assert not any(k.startswith(("eagle", "_mtp")) and v for k, v in warmed.items())


def test_flags_and_config_json(tmp_path: Path) -> None:
    prewarm = _prewarm()
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "deepseek_v4",
                "hidden_size": 7168,
                "index_topk": 1024,
                "compress_ratios": [0, 0, 4, 128, 4, 128],
                "hc_mult": 4,
                "rms_norm_eps": 1e-6,
                "vocab_size": 129280,
            }
        )
    )
    args = prewarm.make_arg_parser().parse_args(
        [
            "--model",
            str(tmp_path),
            "--max-num-batched-tokens",
            "4096",
            "--max-model-len",
            "131072",
            "--max-num-seqs",
            "64",
            "--speculative-config",
            '{"method": "mtp", "num_speculative_tokens": 2}',
            "--index-topk",
            "512",
        ]
    )
    cfg = prewarm.config_from_args(args)
    assert (cfg.hidden_size, cfg.index_topk, cfg.compress_ratios) == (
        7168,
        512,
        (0, 0, 4, 128, 4, 128),
    )
    assert (cfg.max_num_batched_tokens, cfg.max_model_len, cfg.max_num_seqs) == (4096, 131072, 64)
    assert cfg.uses_mtp and cfg.num_speculative_tokens == 2
    none = prewarm.config_from_args(
        prewarm.make_arg_parser().parse_args(["--speculative-config", "{}"])
    )
    assert not none.uses_mtp and prewarm.spec_decode_params(none) is None
    assert prewarm.attention_compress_ratios(none) == {4, 128}


def _parse(*argv: str) -> Any:
    prewarm = _prewarm()
    return prewarm.config_from_args(prewarm.make_arg_parser().parse_args(list(argv)))


def test_serve_defaults_the_cli_mirrors(tmp_path: Path) -> None:
    # vllm serve: MTP without num_speculative_tokens drafts with the model's
    # MTP layers; without --max-model-len the model's own maximum.
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "deepseek_v4",
                "num_nextn_predict_layers": 1,
                "max_position_embeddings": 1 << 20,
            }
        )
    )
    cfg = _parse("--model", str(tmp_path), "--speculative-config", '{"method": "mtp"}')
    assert cfg.uses_mtp and cfg.num_speculative_tokens == 1
    assert cfg.max_model_len == 1 << 20
    assert _parse("--model", str(tmp_path), "--max-model-len", "4096").max_model_len == 4096
    assert _parse().max_model_len == 65536  # no config.json: the report's deployment
    with pytest.raises(SystemExit, match="MTP"):
        _parse("--speculative-config", '{"method": "eagle3", "num_speculative_tokens": 2}')


def test_c128a_keys_follow_the_kernel_blocks_of_the_block_table() -> None:
    # The metadata builders see the attention backend's kernel block size
    # (256) whatever --block-size says, and a block table of kernel blocks:
    # ceil(max_model_len / block_size) KV blocks of block_size / 256 each.
    from dsv4warmup.triton_keys import keys_by_kernel, record_launches
    from vllm.model_executor.warmup.triton_specialization import compile_triton_warmup

    prewarm = _prewarm()

    def keys(*argv: str) -> set[Any]:
        with record_launches() as recorded:
            compile_triton_warmup("rec", prewarm.sparse_mla_launches(_parse(*argv)))
        return keys_by_kernel(recorded)["_build_c128a_topk_metadata_kernel"]

    # 65536 tokens: 256 blocks of 256 = 128 blocks of 512 (2 kernel blocks each)
    assert keys("--block-size", "256") == keys("--block-size", "512") != set()
    # 127 tokens: 1 kernel block of 256 vs 1 KV block of 2048 = 8 kernel blocks
    short = ("--max-model-len", "127")
    assert keys(*short, "--block-size", "256") != keys(*short, "--block-size", "2048")


def test_audit_refuses_what_the_drivers_do_not_model() -> None:
    cfg = _parse(
        "--speculative-config",
        '{"method": "mtp", "num_speculative_tokens": 2, "parallel_drafting": true}',
    )
    with pytest.raises(ValueError, match="parallel_drafting"):
        prewarm_audit.audit_rows(cfg)


@pytest.mark.frozen
@pytest.mark.parametrize(
    ("argv", "flag", "says"),
    [
        (["--block-size", "7"], "--block-size", "multiple of 256"),
        (["--block-size", "128"], "--block-size", "multiple of 256"),
        (["-dcp", "2"], "--decode-context-parallel-size", "sliding-window"),
        (["--kv-cache-dtype", "auto"], "--kv-cache-dtype", "only supports fp8"),
        (["--max-num-batched-tokens", "-5"], "--max-num-batched-tokens", ">= 1"),
        (["--max-num-batched-tokens", "0"], "--max-num-batched-tokens", ">= 1"),
        (["--hf-config-path", "/nonexistent"], "--hf-config-path", "cannot read"),
        (["--model", "{missing}"], "--model", "cannot read"),
        (["--hf-config-path", "{unreadable}"], "--hf-config-path", "cannot read"),
        (["--hf-config-path", "{not_json}"], "--hf-config-path", "not JSON"),
        (["--hf-config-path", "{llama}"], "--hf-config-path", "not a DeepSeek V4 config"),
    ],
)
def test_bad_flags_exit_2_with_one_line(
    tmp_path: Path, argv: list[str], flag: str, says: str
) -> None:
    files = {
        "missing": tmp_path / "missing",
        "unreadable": tmp_path / "unreadable.json",
        "not_json": tmp_path / "not_json.json",
        "llama": tmp_path / "llama",
    }
    files["missing"].mkdir()  # a model directory without config.json
    files["unreadable"].write_text("{}")
    files["unreadable"].chmod(0)
    files["not_json"].write_text("{nope")
    files["llama"].mkdir()
    (files["llama"] / "config.json").write_text(json.dumps({"model_type": "llama"}))
    if os.geteuid() == 0 and "{unreadable}" in argv:
        pytest.skip("root reads a mode-0 file")
    res = _cli(*(a.format(**files) for a in argv), tooling=False)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    errors = [line for line in res.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and flag in errors[0] and says in errors[0], res.stderr
