"""The `fusion-tuner` command line: one thin module per subcommand (parse, validate, hand off)."""
