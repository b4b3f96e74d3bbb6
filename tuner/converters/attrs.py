"""Keys our importer adds to a node's attributes before a converter sees them."""

OPSET = "_opset"  # the model's default-domain opset (where an op's meaning changed between versions)
