"""Peak numbers of the GPUs the performance targets are stated for (issue 48: a throughput target as a fraction
of what the device can do, not as an absolute rate), and the match from ``torch.cuda.get_device_name``.

Each entry: dense FP32 FLOP/s (CUDA cores, no tensor cores), dense TF32 tensor-core FLOP/s, memory bytes/s,
a launch floor in seconds per kernel, and the source. A device not listed has no peak: a target stated against
the peak is then reported as not evaluated, never as met.
"""
from __future__ import annotations

GPUS = {
    "H100-SXM": dict(fp32=67e12, tf32=494.7e12, bandwidth=3.35e12, launch=7e-6,
                     source="NVIDIA H100 Tensor Core GPU datasheet (SXM5: FP32 67 TFLOPS, TF32 989 TFLOPS "
                            "with sparsity = 494.7 dense, HBM3 3.35 TB/s); launch floor ~7 us/kernel is the "
                            "issue-24 estimate (306 kernels -> 2.1 ms), not a datasheet number"),
    "H100-PCIe": dict(fp32=51e12, tf32=378e12, bandwidth=2.0e12, launch=7e-6,
                      source="NVIDIA H100 Tensor Core GPU datasheet (PCIe: FP32 51 TFLOPS, TF32 756 TFLOPS with "
                             "sparsity = 378 dense, HBM2e 2 TB/s); launch floor as H100-SXM"),
    "H100-NVL": dict(fp32=60e12, tf32=417.5e12, bandwidth=3.9e12, launch=7e-6,
                     source="NVIDIA H100 Tensor Core GPU datasheet (NVL: FP32 60 TFLOPS, TF32 835 TFLOPS with "
                            "sparsity = 417.5 dense, HBM3 3.9 TB/s); launch floor as H100-SXM"),
    "H200": dict(fp32=67e12, tf32=494.7e12, bandwidth=4.8e12, launch=7e-6,
                 source="NVIDIA H200 Tensor Core GPU datasheet (SXM: FP32 67 TFLOPS, TF32 989 TFLOPS with "
                        "sparsity = 494.7 dense, HBM3e 4.8 TB/s); launch floor as H100-SXM"),
}


def gpu_key(device_name: str) -> str | None:
    """The ``GPUS`` key of a CUDA device name as torch reports it ("NVIDIA H100 80GB HBM3" -> "H100-SXM",
    "NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA H200"), or None for a device not listed."""
    name = device_name.upper()
    if "H200" in name:
        return "H200"
    if "H100" in name:
        return "H100-PCIe" if "PCIE" in name else "H100-NVL" if "NVL" in name else "H100-SXM"
    return None


def peak_flops(device_name: str) -> float | None:
    """The device's dense FP32 FLOP/s, None where it is not listed."""
    key = gpu_key(device_name)
    return None if key is None else GPUS[key]["fp32"]
