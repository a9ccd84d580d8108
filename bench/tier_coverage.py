"""How much of real Triton repositories' test suites the CPU tier runs: pinned commits of five public
repositories, a fixed list of test items each, every item run under the tier as a validation's base
run would (`kvtasks.run.check`, one run per item), and classified.

    python bench/tier_coverage.py --attorch DIR --liger DIR --fla DIR --flaggems DIR --torchao DIR
        [--repos attorch,fla] [--limit N] [--timeout S] [--json FILE] [--kvtasks SOURCE_TREE]

Each DIR is a local git copy of the repository at its pinned commit (nothing is fetched here). The
repositories need, beside torch/triton/numpy (kvtasks[triton-cpu]) and pytest: attorch nothing;
Liger-Kernel transformers; flash-linear-attention einops and transformers; FlagGems PyYAML,
SQLAlchemy and packaging>=26 (the package installed with `pip install --no-deps -e`); torchao
tabulate and expecttest (`USE_CPP=0 pip install --no-deps --no-build-isolation -e`), its items run
at --cpu-device-capability 10.0 (its mx and blockwise kernels ask for SM100 or SM90). The items were chosen
once, before the first measurement, across each repository's kernels, with the smallest shapes its
own parametrization offers (the interpreter runs every program in Python), bf16 cells left out (the
tier skips them as an interpreter limitation); the list is kept. Left out with their reason: attorch's
conv and multi-head attention tests (their smallest cells, 1x1024x3072 and up, take minutes each in
the interpreter), Liger-Kernel's KL-divergence and TVD tests (their smallest cells have 16441 rows,
past the sparse grid's 4096 programs, so they would only be bounds-checked). FlagGems' and torchao's
were chosen the same way by a first run of each candidate under a development tier, keeping every
failure: left out were only items the repository skips, items the sparse grid would only
bounds-check (torchao's act_quant items, 4096x1024 at the smallest), items that launched no kernel,
and items that failed one run in two (bf16 inputs inside the test body).

An item is one pytest node. Its classes:
  passed             the test ran and passed
  not exercised      it passed having launched no kernel and called no route: it tested no kernel. An
                     outcome the tier reached; whether a GPU would have launched one is not checked
                     here, so the lines also give the share with these counted as not reached
  failed             the test ran and failed on a value or an assertion (numerics: named)
  no test ran        errors only, before the test ran (its module, a conftest or a fixture failed):
                     named; counted in N, not reached
  tier crash         the tier could not run it (kvtasks' hooks, the interpreter, Triton, an unanswered
                     CUDA query): named with its cause
  timed out          past --timeout: the interpreter was too slow for it (named)
  sparse grid        its launches were past --cpu-sparse-grid, so only their first and last programs
                     ran and the tier reported it skipped: bounds-checked, no outcome (named)
  repository skip    skipped by the repository's own guard: counted apart, outside N
  does not import    the repository's pinned commit does not run on this Triton release at all: with the
                     tier's hooks installed the runtime could not be established, and its package fails
                     to import in Triton's interpreter mode without the tier too, with the same error,
                     raised by Triton's own code; or its test module imports a module or name of Triton
                     this release does not have (a plain interpreter confirms). Counted apart, outside N
Last line: `tier coverage: P% of N items reached a test outcome (tier crashes C)`.

With a kvtasks that has no `check` (an older checkout, to measure before), each item is the same
base run through the harness, and crashes are read from its output by the same markers.

With --smoke, one item of a tiny Triton repository the bench builds in a temporary folder (one kernel,
one test file), measured in place of the repositories given: a check that the bench runs with nothing
fetched, not a measurement.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.triton_repos import softmax_repo  # noqa: E402
from _tier_classes import apart_line, counts, strictly  # noqa: E402

PROJECT = Path(__file__).resolve().parent.parent
# --kvtasks DIR measures another kvtasks source tree (main's, for the numbers before): imported first
KVTASKS = sys.argv[sys.argv.index("--kvtasks") + 1] if "--kvtasks" in sys.argv[:-1] else str(PROJECT)
sys.path.insert(0, KVTASKS)
if KVTASKS != str(PROJECT):
    # an editable install's finder would still answer for kvtasks' submodules the other tree lacks
    sys.meta_path[:] = [finder for finder in sys.meta_path if "__editable__" not in getattr(finder, "__module__", "")]

from kvtasks.harness import launching  # noqa: E402
from kvtasks.request import build_request  # noqa: E402

try:
    from kvtasks.run import check  # noqa: E402
except ImportError:  # a kvtasks from before `check`
    check = None

REPOSITORIES = {
    "attorch": {
        "package": "attorch",  # what its tests import
        "pin": "67c2772baf33913ef51c2d1064f746ca17b63749",
        "extras": [],
        "items": [
            'tests/test_act_layers.py::test_act_layers[False-input_dtype0-0.0-Sigmoid-shape0]',
            'tests/test_act_layers.py::test_act_layers[False-input_dtype0-0.0-Sigmoid-shape1]',
            'tests/test_act_layers.py::test_act_layers_at_piece_boundaries[Hardshrink-boundaries0]',
            'tests/test_act_layers.py::test_act_layers_at_piece_boundaries[Softshrink-boundaries1]',
            'tests/test_batch_norm_layer.py::test_batch_norm_layer[False-input_dtype0-None-False-False-False-0.1-1e-05-shape0]',
            'tests/test_batch_norm_layer.py::test_batch_norm_layer[False-input_dtype0-None-False-False-False-0.1-1e-05-shape1]',
            'tests/test_cross_entropy_loss_layer.py::test_cross_entropy_loss_layer[False-input_dtype0-False-shape0]',
            'tests/test_cross_entropy_loss_layer.py::test_cross_entropy_loss_layer[False-input_dtype0-False-shape1]',
            'tests/test_dropout_layer.py::test_dropout_layer[0.0-shape0]',
            'tests/test_dropout_layer.py::test_dropout_layer[0.0-shape1]',
            'tests/test_glu_layer.py::test_glu_layer[False-input_dtype0-sigmoid-shape0]',
            'tests/test_glu_layer.py::test_glu_layer[False-input_dtype0-sigmoid-shape1]',
            'tests/test_layer_norm_layer.py::test_layer_norm_layer[False-input_dtype0-False-False-1e-05-shape0]',
            'tests/test_layer_norm_layer.py::test_layer_norm_layer[False-input_dtype0-False-False-1e-05-shape1]',
            'tests/test_layer_norm_layer.py::test_layer_norm_layer_multiple_rows_per_program[False-shape0]',
            'tests/test_layer_norm_layer.py::test_layer_norm_layer_multiple_rows_per_program[False-shape1]',
            'tests/test_linear_layer.py::test_linear_layer[False-input_dtype0-None-False-16-shape0]',
            'tests/test_linear_layer.py::test_linear_layer[False-input_dtype0-None-False-16-shape1]',
            'tests/test_nll_loss_layer.py::test_nll_loss_layer[False-input_dtype0-False-none-shape0]',
            'tests/test_nll_loss_layer.py::test_nll_loss_layer[False-input_dtype0-False-none-shape1]',
            'tests/test_p_loss_layers.py::test_p_loss_layers[False-input_dtype0-none-SmoothL1Loss-shape0]',
            'tests/test_p_loss_layers.py::test_p_loss_layers[False-input_dtype0-none-SmoothL1Loss-shape1]',
            'tests/test_pooling_layer.py::test_pooling_layer[False-input_dtype0-0-None-2-shape0]',
            'tests/test_pooling_layer.py::test_pooling_layer[False-input_dtype0-0-None-2-shape1]',
            'tests/test_rms_norm_layer.py::test_rms_norm_layer[False-input_dtype0-False-1e-05-shape0]',
            'tests/test_rms_norm_layer.py::test_rms_norm_layer[False-input_dtype0-False-1e-05-shape1]',
            'tests/test_rms_norm_layer.py::test_rms_norm_layer_multiple_rows_per_program[False-shape0]',
            'tests/test_rms_norm_layer.py::test_rms_norm_layer_multiple_rows_per_program[False-shape1]',
            'tests/test_softmax_layers.py::test_softmax_layers[False-input_dtype0-Softmax-shape0]',
            'tests/test_softmax_layers.py::test_softmax_layers[False-input_dtype0-Softmax-shape1]',
        ],
    },
    "liger": {
        "package": "liger_kernel",  # what its tests import
        "pin": "ead96b618e5c67bddc6a6e9bcb99bfe6b5ab661c",
        "extras": ["transformers"],
        "items": [
            'test/transformers/test_rms_norm.py::test_correctness[True-True-LlamaRMSNorm-0.0-llama-dtype0-0.0001-1e-06-5-123-123]',
            'test/transformers/test_layer_norm.py::test_liger_layer_norm[dtype0-1e-05-1e-05-1-1-1023]',
            'test/transformers/test_swiglu.py::test_correctness_llamamlp[dtype0-1.0-1e-05-6-42-123-431]',
            'test/transformers/test_geglu.py::test_correctness[dtype0-1.0-2e-06-9-41-341-4231]',
            'test/transformers/test_rope.py::test_correctness[True-dtype2-0.01-1e-05-1-128-32-8-64]',
            'test/transformers/test_cross_entropy.py::test_correctness[1.0-dtype1-1e-08-1e-06-sum-3-423-32000]',
            'test/transformers/test_jsd.py::test_correctness[dtype2-0.001-0.001-2-1024-3200]',
            'test/transformers/test_softmax.py::test_liger_softmax[dtype0-1e-05-1e-05-shape0]',
            'test/transformers/test_sparsemax.py::test_liger_sparsemax_correctness[dtype0-1e-05-1e-05--1-5-123-123]',
            'test/transformers/test_dyt.py::test_liger_dyt_correctness[dtype0-1e-05-1e-05-1e-05-0.001-1-1-1023-0.5-False]',
            'test/transformers/test_embedding.py::test_embedding_correctness[dtype0-1e-06-1e-05-cuda-100-60-None0]',
            'test/transformers/test_group_norm.py::test_liger_group_norm[dtype0-0.0001-0.0001-1-1-1-3]',
            'test/transformers/test_fused_add_rms_norm.py::test_correctness[True-LlamaAddRMSNorm-0.0-llama-dtype0-0.0001-1e-06-5-123-123]',
            'test/transformers/test_poly_norm.py::test_correctness[dtype0-0.0003-1e-06-5-123-123]',
            'test/transformers/test_relu_squared.py::test_liger_relu_squared_correctness[dtype0-1e-05-1e-05-shape0]',
            'test/transformers/test_fused_linear_cross_entropy.py::test_correctness[True-0.1-42-0.0001-30.0-True-accum_dtype1-True-sum-1.0-dtype3-0.001-0.05-4-47-31-123]',
            'test/transformers/test_qwen2vl_mrope.py::test_correctness[dtype0-1e-05-1e-05-64-mrope_section2-12-2-128-1]',
            'test/transformers/test_llama4_rope.py::test_correctness[dtype0-1e-05-1e-05-1-128-32-8-64]',
            'test/transformers/test_rms_norm.py::test_correctness_functional[True-LlamaRMSNorm-0.0-llama-dtype0-0.0001-1e-06-2-2-8]',
            'test/transformers/test_layer_norm.py::test_liger_layer_norm_functional[dtype0-1e-05-1e-05-2-8-64]',
            'test/transformers/test_swiglu.py::test_correctness_mixtralblocksparsetop2mlp[dtype0-1.0-1e-05-6-42-123-431]',
            'test/transformers/test_geglu.py::test_correctness_functional[dtype0-1e-05-1e-05-2-2-8]',
            'test/transformers/test_rope.py::test_functional_correctness[True-dtype2-0.01-1e-05-1-2-1-2-8]',
            'test/transformers/test_cross_entropy.py::test_correctness_functional[1.0-dtype1-1e-08-1e-06-2-2-8]',
            'test/transformers/test_jsd.py::test_correctness_not_last[dtype2-0.001-0.001-2-1024-3200]',
            'test/transformers/test_softmax.py::test_liger_softmax_functional[dtype0-1e-05-1e-05-shape0]',
            'test/transformers/test_sparsemax.py::test_liger_sparsemax_functional_correctness[dtype0-1e-05-1e-05--1-5-123-123]',
            'test/transformers/test_dyt.py::test_liger_dyt_functional[dtype0-1e-05-1e-05-1-1-1023-False]',
            'test/transformers/test_fused_add_rms_norm.py::test_correctness_functional[True-LlamaAddRMSNorm-0.0-llama-dtype0-0.0001-1e-06-2-2-8]',
            'test/transformers/test_swiglu.py::test_correctness_phi3mlp[dtype0-1.0-1e-05-2-256-256-512]',
            'test/transformers/test_rope.py::test_vision_2d_cos_sin[dtype0-1e-05-1e-05-128-32-64]',
            'test/transformers/test_poly_norm.py::test_forward_shapes[dtype0-2-128-512]',
            'test/transformers/test_geglu.py::test_gemma4_mlp_no_doubling_when_flag_false',
            'test/transformers/test_poly_norm.py::test_multidimensional_input[shape0]',
            'test/transformers/test_group_norm.py::test_liger_group_norm[dtype0-0.0001-0.0001-1-32-32-4]',
            'test/transformers/test_cross_entropy.py::test_correctness_with_out_of_bounds_target_once[2-4096-32000-2]',
            'test/transformers/test_relu_squared.py::test_liger_relu_squared_functional[dtype0-1e-05-1e-05-shape0]',
        ],
    },
    "fla": {
        "package": "fla",  # what its tests import
        "pin": "bc3b101dcb713ddc5bd8924b66754eb68b5ccf89",
        "extras": ["einops", "transformers"],
        "items": [
            'tests/ops/test_gla.py::test_fused_recurrent[B1-T63-H1-D64-gate_logit_normalizer1-torch.float32]',
            'tests/ops/test_simple_gla.py::test_fused_recurrent[B1-T63-H1-D64-scale1-gate_logit_normalizer1-torch.float32]',
            'tests/ops/test_delta.py::test_chunk[B1-T63-H1-D64-scale1-False]',
            'tests/ops/test_gdn.py::test_chunk_gated_delta_rule_fwd_h_blackwell_triton_guard',
            'tests/ops/test_retention.py::test_chunk[B1-T63-H1-K64-expand_ratio1-torch.float16]',
            'tests/ops/test_linear_attn.py::test_fused_recurrent[B1-T64-H1-D64-scaleNone-torch.float32]',
            'tests/ops/test_hgrn.py::test_fused_recurrent[B1-T63-D500-torch.float32]',
            'tests/ops/test_based.py::test_based[B1-T63-H1-D60-torch.float16]',
            'tests/ops/test_solve_tril.py::test_solve_tril[B1-T63-H1-chunk_size16]',
            'tests/ops/test_rwkv6.py::test_chunk[B1-T15-H2-D60-gate_logit_normalizer1.0-torch.float16]',
            'tests/ops/test_rwkv7.py::test_fused_k_update[1-dtype0-64-64-13-4]',
            'tests/ops/test_attn.py::test_parallel[B1-T63-H1-HQ1-D64-scale1.0]',
            'tests/ops/test_lightning_attn.py::test_chunk_with_chunk_size[B1-T64-H2-K64-torch.float16-chunk16]',
            'tests/ops/test_kda.py::test_naive_chunk[B1-T64-H1-HV1-D64-scale1-gate_logit_normalizer1-torch.float32]',
            'tests/ops/test_gsa.py::test_fused_recurrent[B1-T63-H1-D64-M32-gate_logit_normalizer1-torch.float32]',
            'tests/ops/test_forgetting_attn.py::test_parallel[B1-T63-H1-HQ1-D64-scale1.0]',
            'tests/ops/test_nsa.py::test_parallel[B1-T63-H1-HQ16-D64-S16-block_size32-scale1.0-torch.float16]',
            'tests/ops/test_comba.py::test_fused_recurrent[B1-T63-H1-D64-scale1-gate_logit_normalizer1-torch.float32]',
            'tests/ops/test_oja.py::test_fused_recurrent[B1-T63-H1-D64-scale1-gate_logit_normalizer1-torch.float32]',
            'tests/ops/test_delta.py::test_chunk_varlen[H2-D64-cu_seqlens[0, 15]-torch.float16]',
            'tests/ops/test_gdn.py::test_fused_recurrent[B1-T63-H1-HV1-D64-scale1-gate_logit_normalizer1-torch.float32]',
            'tests/ops/test_retention.py::test_chunk_with_chunk_size[B1-T64-H2-K64-torch.float16-chunk16]',
            'tests/ops/test_linear_attn.py::test_naive_chunk[B1-T128-H2-D64-normFalse-torch.float32]',
            'tests/ops/test_hgrn.py::test_fused_recurrent_varlen[D500-cu_seqlens[0, 15]-torch.float32]',
            'tests/ops/test_solve_tril.py::test_solve_tril_varlen[H4-D64-chunk_size16-cu_seqlens[0, 15]]',
            'tests/ops/test_rwkv6.py::test_chunk_with_chunk_size[B1-T64-H2-D32-gate1.0-torch.float32-chunk16]',
            'tests/ops/test_rwkv7.py::test_channel_mixing_no_out_of_bounds_writes',
            'tests/ops/test_attn.py::test_parallel_swa[B1-T63-H1-HQ1-D64-W16]',
            'tests/ops/test_kda.py::test_chunk_invalid_chunk_size',
            'tests/ops/test_gsa.py::test_fused_recurrent_varlen[H4-D64-M64-cu_seqlens[0, 15]-torch.float32]',
            'tests/ops/test_simple_gla.py::test_chunk[B1-T63-H1-D64-scale1-gate_logit_normalizer1-torch.float16]',
            'tests/ops/test_kda.py::test_fused_recurrent[B1-T64-H1-HV1-D64-scale1-gate_logit_normalizer1-use_qk_l2normFalse-torch.float32]',
            'tests/ops/test_rwkv7.py::test_fused_rwkv7_addcmul[True-dtype0-64-2-20-1]',
            'tests/ops/test_gla.py::test_chunk[B1-T63-H1-D64-gate_logit_normalizer1-torch.float16]',
            'tests/ops/test_gdn.py::test_chunk[B2-T75-H4-HV4-D64-scale1-gate_logit_normalizer0.01-mask_p0-use_qk_l2norm_in_kernelFalse-torch.float16]',
        ],
    },
    "flaggems": {
        "package": "flag_gems",  # what its tests import
        "pin": "ed2508bcb5a03000e9774734201d840ba362cd11",
        "extras": ["PyYAML", "SQLAlchemy", "packaging>=26"],
        "items": [
            'tests/test_add.py::test_add[dtype1-0.001-shape1]',
            'tests/test_abs.py::test_abs[dtype1-shape1]',
            'tests/test_exp.py::test_exp[dtype1-shape1]',
            'tests/test_gelu.py::test_gelu[none-dtype1-shape1]',
            'tests/test_silu.py::test_silu[dtype1-shape1]',
            'tests/test_rsqrt.py::test_rsqrt[dtype1-shape1]',
            'tests/test_isnan.py::test_isnan[dtype1-shape1]',
            'tests/test_clamp.py::test_clamp[dtype1-None-0.001-0.001-shape1]',
            'tests/test_masked_fill.py::test_masked_fill[tensor-0.3-dtype1-shape1]',
            'tests/test_softmax.py::test_softmax[False-1-dtype1-shape0]',
            'tests/test_log_softmax.py::test_log_softmax[1-dtype1-shape0]',
            'tests/test_layer_norm.py::test_layer_norm[dtype1-False-shape0]',
            'tests/test_group_norm.py::test_group_norm[dtype1-False-16-3-16-16-1]',
            'tests/test_sum.py::test_sum[dtype1-shape0]',
            'tests/test_mean.py::test_mean_dim[dtype1-True-0-shape0]',
            'tests/test_max.py::test_max_dim[dtype1-0-True-shape0]',
            'tests/test_argmax.py::test_argmax[dtype1-True-1-shape0]',
            'tests/test_var_mean.py::test_var_mean[dtype1-True-1-1-shape0]',
            'tests/test_cumsum.py::test_cumsum[dtype1-shape0]',
            'tests/test_mm.py::test_mm[False-dtype1-1-1-32]',
            'tests/test_bmm.py::test_bmm[dtype1-1-1-32]',
            'tests/test_addmm.py::test_addmm[False-dtype1-0.001-1-1-32]',
            'tests/test_index_select.py::test_index_select[dtype1-0-shape0]',
            'tests/test_embedding.py::test_embedding[dtype1-True-None-128-4-2-4096]',
            'tests/test_sort.py::test_sort[0-dtype1-True-1-4]',
            'tests/test_rms_norm.py::test_rms_norm[dtype1-shape0]',
            'tests/test_skip_layer_norm.py::test_skip_layernorm[dtype1-shape0]',
            'tests/test_outer.py::test_outer[dtype1-1-32]',
            'tests/test_cross_entropy_loss.py::test_cross_entropy_loss_indices[dtype1-True-mean-0-1-shape0]',
            'tests/test_apply_rotary_pos_emb.py::test_apply_rotary_pos_emb[True-True-dtype1-64-8-1-512-4]',
        ],
    },
    "torchao": {
        "package": "torchao",  # what its tests import
        "pin": "36027d82d1ad9949597ea16002ff4940374b1b94",
        "extras": ["tabulate", "expecttest"],
        "options": {"cpu_device_capability": "10.0"},
        "items": [
            'test/prototype/mx_formats/test_kernels.py::test_triton_f32_to_e8m0_rceil_fallback',
            'test/prototype/mx_formats/test_kernels.py::test_triton_mxfp8_dequant_dim0[orig_dtype0-128-128]',
            'test/prototype/mx_formats/test_kernels.py::test_triton_mxfp8_dequant_dim0[orig_dtype0-128-256]',
            'test/prototype/mx_formats/test_kernels.py::test_rearrange[shape0]',
            'test/prototype/mx_formats/test_kernels.py::test_rearrange[shape1]',
            'test/prototype/mx_formats/test_kernels.py::test_rearrange[shape2]',
            'test/prototype/mx_formats/test_kernels.py::test_rearrange[shape7]',
            'test/prototype/mx_formats/test_kernels.py::test_triton_mxfp8_dim0_randn[ScaleCalculationMode.FLOOR-128-128]',
            'test/prototype/mx_formats/test_kernels.py::test_triton_mxfp8_dim1_randn[ScaleCalculationMode.FLOOR-128-128]',
            'test/prototype/mx_formats/test_kernels.py::test_triton_mxfp8_dim0_zeros[ScaleCalculationMode.RCEIL]',
            'test/prototype/moe_training/test_kernels.py::test_triton_mx_block_rearrange_2d_M_groups[256-256-4]',
            'test/prototype/moe_training/test_kernels.py::test_triton_mx_block_rearrange_2d_K_groups[1-512-256]',
            'test/prototype/moe_training/test_kernels.py::test_triton_mx_block_rearrange_2d_K_groups[4-512-256]',
            'test/prototype/moe_training/test_kernels.py::test_row_major_with_jagged_rowwise_scales[False]',
            'test/prototype/moe_training/test_kernels.py::test_column_major_with_jagged_colwise_scales[False]',
            'test/prototype/moe_training/test_kernels.py::test_row_major_with_jagged_rowwise_scales_transpose_method[True]',
            'test/prototype/blockwise_fp8_training/test_blockwise_kernels.py::test_triton_fp8_gemm_1x128_128x128[dtype0-2-512-128]',
            'test/prototype/blockwise_fp8_training/test_blockwise_kernels.py::test_triton_fp8_gemm_1x128_128x1[dtype0-2-512-128]',
            'test/prototype/blockwise_fp8_training/test_blockwise_kernels.py::test_triton_quantize_fp8_weight_quant_rhs[4096-1024-128]',
            'test/prototype/blockwise_fp8_training/test_blockwise_kernels.py::test_triton_quantize_fp8_weight_quant_transposed_rhs[128]',
            'test/prototype/blockwise_fp8_inference/test_blockwise.py::test_blockwise_fp8_gemm[dtype0-2-512-128]',
            'test/prototype/blockwise_fp8_inference/test_blockwise.py::test_blockwise_fp8_gemm[dtype1-2-512-128]',
            'test/prototype/moe_training/ep/test_kernels.py::test_triton_permute_bwd[32-1-2-1024-512]',
            'test/prototype/moe_training/ep/test_kernels.py::test_triton_permute_bwd[32-2-4-1024-512]',
            'torchao/prototype/float8nocompile/kernels/fp8_dynamic_tensorwise_test.py::test_fp8_hp_to_fp8_row_major[input_shape0-KernelAlgorithm.ATOMIC_MAX]',
            'torchao/prototype/float8nocompile/kernels/fp8_dynamic_tensorwise_test.py::test_fp8_hp_to_fp8_col_major[input_shape0-KernelAlgorithm.REDUCTION]',
            'torchao/prototype/float8nocompile/kernels/fp8_dynamic_tensorwise_test.py::test_fp8_hp_to_fp8_row_and_col_major[input_shape0-KernelAlgorithm.ATOMIC_MAX]',
            'torchao/prototype/float8nocompile/kernels/fp8_dynamic_tensorwise_test.py::test_fp8_hp_to_fp8_row_major_t[input_shape0-KernelAlgorithm.ATOMIC_MAX]',
            'test/prototype/moe_training/nvfp4_training/test_group_weight_amax.py::test_group_weight_amax_matches_torch_reduction[one-expert]',
            'test/prototype/moe_training/nvfp4_training/test_hadamard_amax.py::test_rht_amax_vs_reference[M64-N128-triton]',
        ],
    },
}

# --smoke's items: of the masked softmax repository the tests build (a test that asks for "cuda", as the
# real ones do)
SMOKE_ITEMS = ["tests/test_softmax.py::test_softmax[4-64-f32]"]

# what a test's own output says when the tier, not the code, could not run it: how a kvtasks from
# before `check` and its crash records is read
_CRASH_MARKERS = (
    ("unanswered CUDA query", re.compile(r"Torch not compiled with CUDA enabled|Found no NVIDIA driver|"
                                         r"has no attribute '_cuda_|cannot import name '_cuda_")),
    ("autotune disk cache", re.compile(r"'function' object has no attribute 'fn'")),
    ("interpreter value", re.compile(r"'(int|float|bool|NoneType)' object has no attribute")),
    ("libdevice", re.compile(r"kvtasks CPU tier: libdevice\.\w+ has no equivalent")),
    ("interpreter", re.compile(r"InterpreterError|triton/runtime/interpreter\.py")),
)
_REPO_SKIP = re.compile(r"bf16|bfloat16|sparse grid", re.IGNORECASE)  # the tier's own skips, never the repository's


def _marker_cause(text: str) -> str | None:
    for name, pattern in _CRASH_MARKERS:
        found = pattern.search(text)
        if found:
            line = next((line.strip() for line in text.splitlines() if found.group(0) in line), found.group(0))
            return f"{name}: {line[:200]}"
    return None


def _request(repo: Path, node: str, options: dict | None = None):
    return build_request({"repo": str(repo), "target": node, "cpu_tier": "triton", "runner": "pytest",
                          "no_perf": True, "label": "tier-coverage", **(options or {})})


def run_item(repo: Path, node: str, options: dict | None = None, package: str | None = None) -> dict:
    """One item as a base run would run it (with the repository's own options); its class and what said so.
    `package` is what the repository's tests import, tried without the tier when the runtime is not established."""
    request = _request(repo, node, options)
    if check is not None:
        return _checked(request, repo, package)
    with tempfile.TemporaryDirectory(prefix="tier-coverage-") as scratch:
        done = launching.run(request, runner="pytest", run_dir=Path(scratch), label="base-repo",
                             cpu_tier={"sparse_programs": request.cpu_sparse_grid,
                                       "device_capability": request.cpu_device_capability})
        outcomes = [case.model_dump() for case in done.cases]
        text = Path(done.log).read_text(errors="replace")
    crashes = ((done.receipt or {}).get("cpu_tier") or {}).get("crashes") or []
    violations = ((done.receipt or {}).get("cpu_tier") or {}).get("violations") or []
    return classify(outcomes, crashes, text, done.stats.executed, done.timed_out, done.exit, None, [], violations)


def _checked(request, repo: Path, package: str | None) -> dict:
    """An item run with `check`, which names the tier's crashes and what pytest could not collect."""
    found = check.check(request)
    if found["blocked"] and not found["runtime_established"] and found.get("cpu_tier_hooks") == "installed":
        failing = triton_refuses_import(repo, package)
        if failing and failing in (found.get("runtime") or ""):
            return {"class": "does not import", "cause": f"Triton refuses it without the tier too: {failing[:200]}"}
    run = found["run"] or {}
    outcomes = run.get("outcomes", [])
    text = "\n".join([run.get("log_tail", ""), *(case.get("message", "") for case in outcomes)])
    verdict = classify(outcomes, found["tier_crashes"], text, run.get("executed", 0), run.get("timed_out", False),
                       run.get("exit"), found["blocked"], found.get("not_exercised", []), found.get("violations", []))
    lacking = release_lacks(found.get("collection_errors", [])) if verdict["class"] == "no test ran" else None
    return {"class": "does not import", "cause": lacking} if lacking else verdict


# what an import of a part of Triton the installed release does not have says
_TRITON_MODULE = re.compile(r"No module named '(triton(?:\.\w+)*)'")
_TRITON_NAME = re.compile(r"cannot import name '(\w+)' from '(triton(?:\.\w+)*)'")
# exit 0 when this release lacks the module, or the name (neither an attribute nor a submodule of it)
_LACKS = """import importlib, importlib.util, sys
module, name = sys.argv[1], sys.argv[2]
if importlib.util.find_spec(module) is None:
    raise SystemExit(0)
lacks = name and not hasattr(importlib.import_module(module), name) and importlib.util.find_spec(module + "." + name) is None
raise SystemExit(0 if lacks else 1)
"""


def release_lacks(errors: list[str]) -> str | None:
    """Why the item cannot run on this Triton release at all: a collection error imports a module or a
    name of Triton that this release does not have, as a plain interpreter (no tier, no kvtasks)
    confirms. None for any other error."""
    for error in errors:
        named = _TRITON_NAME.search(error)
        module, name = (named.group(2), named.group(1)) if named else (None, "")
        found = _TRITON_MODULE.search(error)
        module = module or (found.group(1) if found else None)
        if module is None:
            continue
        done = subprocess.run([sys.executable, "-c", _LACKS, module, name], env=_without_tier(), capture_output=True,
                              timeout=300)
        if done.returncode == 0:
            return f"triton {_triton_version()} has no {module + ('.' + name if name else '')}, which the test imports"
    return None


def _triton_version() -> str:
    from importlib.metadata import version
    return version("triton")


_RAISED_IN = re.compile(r'^  File "([^"]+)"', re.MULTILINE)


def triton_refuses_import(folder: Path, package: str | None) -> str | None:
    """The error (`Type: message`) that `import package` raises in the copy under this interpreter in
    Triton's interpreter mode with no tier and no kvtasks, when Triton's own code raises it (its
    autotuner refusing the repository's kernels, say): the repository does not run on this release, on
    any device. None when it imports, or when anything but Triton raised (a CUDA query, a missing
    library: the tier's matter, or the environment's)."""
    if not package:
        return None
    environment = {**_without_tier(), "TRITON_INTERPRET": "1",
                   "PYTHONPATH": os.pathsep.join(str(root) for root in (folder, folder / "src") if root.is_dir())}
    done = subprocess.run([sys.executable, "-c", f"import {package}"], cwd=folder, env=environment,
                          capture_output=True, text=True, timeout=600)
    frames = _RAISED_IN.findall(done.stderr)
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    if done.returncode == 0 or not frames or not lines or len(lines[-1]) < 20:
        return None
    found = importlib.util.find_spec("triton")  # this interpreter's, found without importing it
    folders = list(found.submodule_search_locations or []) if found is not None else []
    return lines[-1] if any(frames[-1].startswith(folder + os.sep) for folder in folders) else None


def _without_tier() -> dict:
    """This process's environment with no Triton, kvtasks or module-path setting: a plain interpreter's."""
    return {name: value for name, value in os.environ.items()
            if not name.startswith(("TRITON_", "KVTASKS_")) and name != "PYTHONPATH"}


def classify(outcomes, crashes, text, executed, timed_out, exit_code, blocked, idle=(), violations=()) -> dict:
    if blocked:
        return {"class": "tier crash", "cause": f"could not run: {blocked}"}
    if timed_out:
        return {"class": "timed out", "cause": "past --timeout in the interpreter"}
    failed = [case for case in outcomes if case["outcome"] in ("failed", "error")]
    if crashes and (not executed or len(failed) <= len({crash.get("test") for crash in crashes})):
        return {"class": "tier crash", "cause": crashes[0]["cause"]}
    if failed and violations:  # the sanitizer's finding is the test's outcome, whatever wraps it
        first = violations[0]
        return {"class": "failed", "cause": f"bounds violation: {first.get('op')} in kernel {first.get('kernel')}, "
                                            f"argument {first.get('argument')}"}
    if failed or exit_code not in (0, 5):
        # a kvtasks with `check` records the tier's crashes itself (above): the markers would take the
        # code's own failures inside a kernel (InterpreterError wraps them all) for the tier's
        cause = _marker_cause(text) if check is None else None
        if cause:
            return {"class": "tier crash", "cause": cause}
        if failed and not executed:  # errors only, at collection or in fixtures: the test itself never ran
            return {"class": "no test ran", "cause": failed[0].get("message", "")[:200]}
        if failed:
            return {"class": "failed", "cause": failed[0].get("message", "")[:200]}
        return {"class": "tier crash", "cause": f"exit {exit_code} with no test outcome: {text.strip()[-200:]}"}
    if executed and len(idle) >= executed:
        return {"class": "not exercised", "cause": "passed without launching a kernel or calling a route"}
    if executed:
        return {"class": "passed", "cause": ""}
    skipped = [case for case in outcomes if case["outcome"] == "skipped"]
    if any("sparse grid" in case.get("message", "") for case in skipped):
        return {"class": "sparse grid", "cause": "launches past the sparse grid: bounds-checked, outputs not computed"}
    if skipped and not any(_REPO_SKIP.search(case.get("message", "")) for case in skipped):
        return {"class": "repository skip", "cause": skipped[0].get("message", "")[:200]}
    return {"class": "tier crash", "cause": f"no test outcome ({skipped[0]['message'][:200] if skipped else 'nothing ran'})"}


def _pinned(name: str, folder: Path) -> str:
    """The copy's HEAD: the pinned commit, or a local commit on it (a copy whose large data blobs are
    absent must drop them to be a clean worktree); anything else is refused."""
    def git(*args):
        return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True)

    head, pin = git("rev-parse", "HEAD").stdout.strip(), REPOSITORIES[name]["pin"]
    if head != pin and git("merge-base", "--is-ancestor", pin, "HEAD").returncode != 0:
        sys.exit(f"{name}: {folder} is at {head or 'no commit'}, not on the pinned {pin}")
    return "" if head == pin else f" (plus local commits: {git('log', '--format=%s', pin + '..HEAD').stdout.strip()})"


def measure(name: str, folder: Path, items: list[str]) -> list[dict]:
    """Each item run and classified, a line each, then the repository's coverage line."""
    results = []
    for node in items:
        started = time.monotonic()
        declared = REPOSITORIES.get(name, {})
        verdict = run_item(folder, node, declared.get("options"), declared.get("package"))
        verdict.update(repo=name, item=node, seconds=round(time.monotonic() - started, 1))
        results.append(verdict)
        print(f"{verdict['class']:16} {verdict['seconds']:6.1f}s  {node}"
              + (f"\n{'':26}{verdict['cause']}" if verdict["cause"] else ""), flush=True)
    print(f"{name}: counted apart: {apart_line(results)}", flush=True)
    print(f"{name}: {coverage_line(results)}", flush=True)
    return results


def coverage_line(results: list[dict]) -> str:
    percent, counted, crashes = counts(results)
    return f"tier coverage: {percent:.1f}% of {counted} items reached a test outcome (tier crashes {crashes})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in REPOSITORIES:
        parser.add_argument(f"--{name}", type=Path, help=f"local git copy of {name} at its pinned commit")
    parser.add_argument("--repos", default=",".join(REPOSITORIES), help="which to measure (default all given)")
    parser.add_argument("--limit", type=int, default=0, help="only the first N items of each (a subset; said so)")
    parser.add_argument("--timeout", type=int, default=180, help="seconds per item (TIMEOUT)")
    parser.add_argument("--json", type=Path, help="write every item's class and cause here")
    parser.add_argument("--kvtasks", help="measure the kvtasks in this source tree (default: this one)")
    parser.add_argument("--smoke", action="store_true",
                        help="one item of a tiny repository built here instead of the repositories given")
    options = parser.parse_args()
    os.environ["TIMEOUT"] = str(options.timeout)
    chosen = [] if options.smoke else [name for name in options.repos.split(",") if getattr(options, name, None)]
    print(f"kvtasks: {'with check' if check is not None else 'without check (harness base runs)'}", flush=True)
    every = []
    if options.smoke:
        with tempfile.TemporaryDirectory(prefix="tier-coverage-smoke-") as scratch:
            print(f"== smoke: a Triton repository built here: {len(SMOKE_ITEMS)} items; extras: none", flush=True)
            every += measure("smoke", softmax_repo(Path(scratch) / "softmax"), SMOKE_ITEMS)
    for name in chosen:
        folder = getattr(options, name).resolve()
        local = _pinned(name, folder)
        items = REPOSITORIES[name]["items"]
        if options.limit:
            items = items[:options.limit]
        print(f"== {name} at {REPOSITORIES[name]['pin'][:12]}{local}: {len(items)} items"
              + (f" (the first {options.limit} of {len(REPOSITORIES[name]['items'])})" if options.limit else "")
              + f"; extras: {', '.join(REPOSITORIES[name]['extras']) or 'none'}", flush=True)
        every += measure(name, folder, items)
    crashes: dict[str, list[str]] = {}
    for result in every:
        if result["class"] not in ("passed", "failed", "repository skip"):
            crashes.setdefault(f"{result['class']}: {result['cause']}", []).append(f"{result['repo']}: {result['item']}")
    if crashes:
        print("items that reached no test outcome, tested no kernel or cannot import, by class and cause:")
        for cause, items in sorted(crashes.items(), key=lambda entry: -len(entry[1])):
            print(f"  {len(items)} x {cause}\n      first: {items[0]}")
    if options.json:
        options.json.write_text(json.dumps(every, indent=2))
    print(f"counted apart: {apart_line(every)}; {strictly(every)}")
    print(coverage_line(every))
    return 0


if __name__ == "__main__":
    sys.exit(main())
