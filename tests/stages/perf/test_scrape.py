from kvtasks.stages.perf.scrape import column_kind, scrape


def test_scrapers_read_every_format():
    markdown = "| shape | dtype | latency (us) |\n|---|---|---|\n| 64x64 | f16 | 12.5 |\n| 128x64 | f16 | 20 |\n"
    perf_lines = "[perf] dim: (128, 8192) , dtype: torch.bfloat16 ck avg: 12.5 us triton avg: 14 us\n"
    csv = "M,N,time_ms\n64,128,0.5\n128,128,0.9\n"
    triton = ("softmax-performance:\n        N  Triton (GB/s)  Torch (GB/s)\n0   256.0  100.5  90.0\n"
              "1   512.0  120.0  95.5\n")
    assert scrape(markdown)[("shape|dtype", "64x64 / f16")] == {"latency (us)": ("latency", 12.5)}
    assert scrape(perf_lines)[("[perf]", "dim: (128, 8192) , dtype: torch.bfloat16")] == {
        "ck us": ("latency", 12.5), "triton us": ("latency", 14.0)}
    assert scrape(csv)[("m|n", "128 / 128")] == {"time_ms": ("latency", 0.9)}
    assert scrape(triton)[("n", "512.0")] == {"Triton (GB/s)": ("throughput", 120.0),
                                              "Torch (GB/s)": ("throughput", 95.5)}
    assert column_kind("TFLOPS") == "throughput" and column_kind("us") == "latency" and column_kind("dtype") == "key"


def test_row_identity_rests_on_shape_cells_never_on_measured_values():
    unlabelled = ("| M | dtype | flydsl | us |\n|---|---|---|---|\n| 64 | bf16 | 3.1e-04 | 12.5 |\n"
                  "| 128 | bf16 | 0.002 | 20 |\n")
    assert set(scrape(unlabelled)) == {("m|dtype", "64 / bf16"), ("m|dtype", "128 / bf16")}
    ratio = "| N | speedup | ms |\n|---|---|---|\n| 256.0 | 1 | 0.5 |\n| 512.0 | 2 | 0.9 |\n"
    assert set(scrape(ratio)) == {("n", "256.0"), ("n", "512.0")}  # a header naming a ratio, integral or not
    # fractions that alone tell the rows apart are a setting (a dropout p), not a measurement
    setting = "| M | p | us |\n|---|---|---|\n| 64 | 0.0 | 12.5 |\n| 64 | 0.1 | 20 |\n"
    assert set(scrape(setting)) == {("m|p", "64 / 0.0"), ("m|p", "64 / 0.1")}
    assert column_kind("max abs diff") == column_kind("rel_err") == column_kind("mem (MB)") == "measured"
