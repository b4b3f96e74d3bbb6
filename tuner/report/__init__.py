"""Reports: what fusion changes, measured, and ONNX Runtime as the reference.

kernels.py    static metrics read from each built module (launches, traffic, FLOPs, parallelism, footprint)
machine.py    this machine's measured limits: per-launch cost, peak GFLOP/s and GB/s
timing.py     alternating-block latency beside the peers, and a per-kernel profile from the VM's instrument hook
plots.py      the pictures
verdict.py    the one-paragraph verdict (fusion, other strategies, ONNX Runtime)
documents.py  report.md / report.html / report.json / kernels.csv
reference.py  ONNX Runtime as the reference: sessions, outputs, comparison
"""
