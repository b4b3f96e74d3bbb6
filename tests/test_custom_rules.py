"""TOPI's pooling blocks name MetaSchedule rules TVM 0.27 does not ship; ours fall through to the generic rules
without TVM's C++ warning (which reached the terminal on every tune, past -q)."""

import tvm
from tvm.script import ir as I
from tvm.script import relax as R


def _pool_task():
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    @I.ir_module
    class Pool:
        @R.function
        def main(x: R.Tensor((1, 16, 32, 32), "float32")):
            with R.dataflow():
                y = R.nn.max_pool2d(x, pool_size=[2, 2], strides=[2, 2])
                z = R.nn.avg_pool2d(y, pool_size=[2, 2], strides=[2, 2])
                R.output(z)
            return z

    mod = relax.transform.LegalizeOps()(Pool)
    return ms.relax_integration.extract_tasks(mod, tvm.target.Target({"kind": "llvm", "num-cores": 2}))


def test_pool_blocks_are_scheduled_without_the_unknown_rule_warning(capfd):
    from tuner.tuning.spaces import bare_context

    tasks = _pool_task()
    scripts = [(t, t.dispatched[0].script()) for t in tasks]
    assert any('"meta_schedule.pool_max"' in s for _, s in scripts)  # TOPI still asks for the rule by name
    assert any('"meta_schedule.pool_avg"' in s for _, s in scripts)
    capfd.readouterr()
    for task, _ in scripts:
        spaces = bare_context(task, "post-order-apply").generate_design_space()
        assert spaces and all("schedule_rule" not in sch.mod.script() for sch in spaces)
    err = capfd.readouterr().err
    assert "Unknown schedule rule" not in err, err
