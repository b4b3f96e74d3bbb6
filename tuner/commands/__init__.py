"""What each command does, one module per command, named after it (`cli/` only parses and validates):

check       check.check_model        compile     compile.compile_model
run         run.run_package          tune-model  tune_model.tune_model
compare     compare.compare          plan        tuner.plan.build_plan
db          tuner.tuning.database.store (show, merge)
"""
