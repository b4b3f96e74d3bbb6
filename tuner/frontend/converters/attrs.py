"""What our converters share: keys the importer adds to a node's attributes, and reading constant inputs."""

OPSET = "_opset"  # the model's default-domain opset (where an op's meaning changed between versions)


def constant_values(expr):
    """The flattened values of a constant input (a numpy array), or None when it is computed at run time."""
    import tvm

    if expr is None or not isinstance(expr, tvm.ir.expr.Constant):
        return None
    return expr.value.numpy().reshape(-1)
