"""What the softmax tests hold the kernel to, per dtype: shared by every test that imports it."""
TOL = {"f32": 1e-5, "f16": 2e-3}
