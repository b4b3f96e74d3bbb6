"""Stage 1, ONNX in: loading, checks, shape inputs, If folding, ONNX-level rewrites, the Relax importer and our
converters.
"""
