"""Records applied, in-model check, VM build and the package writer."""
