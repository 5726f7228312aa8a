"""Measurement: ``fedrepro bench`` (``bench``, timing the ``workloads``), per-step counts of kernels, syncs
and bytes (``step_counts``, counted by ``counting``), the batched-group memory model against measured peaks
(``memory``), compiled against uncompiled steps (``compile_bench``), ``fedrepro validate`` (``validate``) and
the asv history (``asv_history``)."""
