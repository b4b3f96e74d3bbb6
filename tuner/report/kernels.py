"""Static metrics of a built variant, read from its IRModule after fusion and scheduling (nothing typed in).

Per kernel launch: bytes read (every tensor argument, weights included) and written, FLOPs
(`estimate_tir_flops` of the scheduled PrimFunc), FLOPs per byte, and the parallel extent of its schedule
(CPU: product of `T.parallel` loop extents; CUDA: grid x block from the thread bindings).
Per variant: intermediate traffic (tensors one kernel writes and others read, counted once written and once
per reading kernel), weights, and the footprint that Relax's StaticPlanBlockMemory plans for intermediates.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from tuner.core.ir import flops, kernel_script, nbytes, primfuncs, product, storage


@dataclass
class KernelMetrics:
    index: int  # launch order in main
    kernel: str  # PrimFunc name
    var: str  # the binding it produces
    flops: float
    bytes_read: int
    bytes_written: int
    weight_bytes: int  # part of bytes_read that are constants
    parallel_extent: int  # iterations run in parallel (1: serial)
    grid: int | None = None  # CUDA blocks
    block: int | None = None  # CUDA threads per block

    @property
    def bytes_total(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float:
        """FLOPs per byte of global memory touched."""
        return self.flops / self.bytes_total if self.bytes_total else 0.0

    def to_json(self) -> dict:
        return {**asdict(self), "bytes_total": self.bytes_total, "intensity": self.intensity}


@dataclass
class StaticMetrics:
    kernels: list[KernelMetrics]
    intermediate_tensors: int  # tensors written by one kernel and read by another
    intermediate_bytes: int  # their size
    intermediate_traffic_bytes: int  # written once + read by each consuming kernel
    weight_bytes: int  # distinct constants, once
    planned_storage_bytes: int  # intermediate storage after StaticPlanBlockMemory
    unplanned_storage_bytes: int  # every kernel output kept alive separately

    @property
    def launches(self) -> int:
        return len(self.kernels)

    @property
    def flops(self) -> float:
        return sum(k.flops for k in self.kernels)

    @property
    def bytes_read(self) -> int:
        return sum(k.bytes_read for k in self.kernels)

    @property
    def bytes_written(self) -> int:
        return sum(k.bytes_written for k in self.kernels)

    @property
    def traffic_bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float:
        return self.flops / self.traffic_bytes if self.traffic_bytes else 0.0

    def parallel_summary(self) -> dict:
        ext = sorted(k.parallel_extent for k in self.kernels)
        if not ext:
            return {"median": 0, "min": 0, "max": 0, "serial_kernels": 0, "flops_weighted": 0.0}
        total = self.flops or 1.0
        return {
            "median": ext[len(ext) // 2],
            "min": ext[0],
            "max": ext[-1],
            "serial_kernels": sum(e <= 1 for e in ext),
            # how parallel the average FLOP is: horizontal fusion widens kernels, vertical keeps the extent
            "flops_weighted": sum(k.parallel_extent * k.flops for k in self.kernels) / total,
        }

    def to_json(self) -> dict:
        return {
            "launches": self.launches,
            "flops": self.flops,
            "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written,
            "traffic_bytes": self.traffic_bytes,
            "intensity": self.intensity,
            "intermediate_tensors": self.intermediate_tensors,
            "intermediate_bytes": self.intermediate_bytes,
            "intermediate_traffic_bytes": self.intermediate_traffic_bytes,
            "weight_bytes": self.weight_bytes,
            "planned_storage_bytes": self.planned_storage_bytes,
            "unplanned_storage_bytes": self.unplanned_storage_bytes,
            "parallelism": self.parallel_summary(),
        }


# extents print as `8` or `T.int64(8)`
_INT = r"(?:T\.int(?:32|64)\()?(\d+)\)?"
_PARALLEL = re.compile(r"T\.parallel\(" + _INT + r"\)")
_BIND = re.compile(r"T\.thread_binding\((?:0, )?" + _INT + r", thread=\"((?:blockIdx|threadIdx)\.[xyz])\"\)")
_LAUNCH = re.compile(r"T\.launch_thread\(\"((?:blockIdx|threadIdx)\.[xyz])\", " + _INT + r"\)")


def parallelism(script: str) -> tuple[int, int | None, int | None]:
    """(parallel extent, grid, block) of a scheduled PrimFunc, read from its TVMScript.

    Nested parallel loops multiply; a kernel with several sibling parallel nests reports its widest.
    """
    axes: dict[str, int] = {}  # blockIdx.x -> extent; sibling loops bound to one axis share it (take the max)
    for axis, n in [(a, int(n)) for n, a in _BIND.findall(script)] + [(a, int(n)) for a, n in _LAUNCH.findall(script)]:
        axes[axis] = max(axes.get(axis, 1), n)
    if axes:
        grid = product(n for a, n in axes.items() if a.startswith("blockIdx")) or 1
        block = product(n for a, n in axes.items() if a.startswith("threadIdx")) or 1
        return grid * block, grid, block
    best, current, depth_stack = 1, 1, []
    # Walk lines: a parallel loop's extent multiplies with enclosing parallel loops (by indentation).
    for line in script.splitlines():
        m = _PARALLEL.search(line)
        indent = len(line) - len(line.lstrip())
        while depth_stack and depth_stack[-1][0] >= indent:
            current //= depth_stack.pop()[1]
        if m:
            ext = int(m.group(1))
            depth_stack.append((indent, ext))
            current *= ext
            best = max(best, current)
    return best, None, None


def static_metrics(fused_mod, target) -> StaticMetrics:
    """Metrics of the module `build_prepared` compiled (after fusion, tuned records and GPU scheduling)."""
    import tvm
    from tvm import relax

    mod = relax.transform.RewriteDataflowReshape()(fused_mod)
    funcs = primfuncs(mod)
    call_tir = tvm.ir.Op.get("relax.call_tir")
    flops_cache: dict[str, float] = {}
    par_cache: dict[str, tuple] = {}
    alias: dict = {}  # reshape views -> the tensor they view
    producer: dict = {}  # tensor var -> launch index
    readers: dict = {}  # tensor var -> set of launch indices reading it
    kernels: list[KernelMetrics] = []
    weights: dict[int, int] = {}
    main = mod["main"]
    outputs = _returned_vars(main.body.body)
    for block in main.body.blocks:
        for b in block.bindings:
            v = b.value
            if isinstance(v, relax.Call) and v.op == call_tir:
                name = v.args[0].name_hint
                args = list(v.args[1].fields) if isinstance(v.args[1], relax.Tuple) else [v.args[1]]
                idx = len(kernels)
                read = weight = 0
                for a in args:
                    n = nbytes(a.ty)
                    read += n
                    if isinstance(a, tvm.ir.expr.Constant):
                        weight += n
                        weights[id(a)] = n  # distinct constant objects
                    elif isinstance(a, relax.Var):
                        readers.setdefault(alias.get(a, a), set()).add(idx)
                if name not in flops_cache:
                    flops_cache[name] = flops(funcs.get(name))
                    par_cache[name] = parallelism(kernel_script(funcs[name])) if name in funcs else (1, None, None)
                ext, grid, blk = par_cache[name]
                kernels.append(
                    KernelMetrics(
                        idx, name, b.var.name, flops_cache[name], read, nbytes(b.var.ty), weight, ext, grid, blk
                    )
                )
                producer[b.var] = idx
            elif isinstance(v, relax.Var):
                alias[b.var] = alias.get(v, v)
            elif (
                isinstance(v, relax.Call)
                and getattr(v.op, "name", "") == "relax.reshape"
                and isinstance(v.args[0], relax.Var)
            ):
                alias[b.var] = alias.get(v.args[0], v.args[0])
            elif isinstance(v, relax.TupleGetItem) and isinstance(v.tuple_value, relax.Var):
                alias[b.var] = alias.get(v.tuple_value, v.tuple_value)
    out_roots = {alias.get(o, o) for o in outputs}
    inter = [t for t in producer if readers.get(t) and t not in out_roots]
    inter_bytes = sum(nbytes(t.ty) for t in inter)
    inter_traffic = sum(nbytes(t.ty) * (1 + len(readers[t])) for t in inter)
    planned, unplanned = storage(fused_mod, target)
    return StaticMetrics(kernels, len(inter), inter_bytes, inter_traffic, sum(weights.values()), planned, unplanned)


def _returned_vars(expr) -> list:
    from tvm import relax

    if isinstance(expr, relax.Var):
        return [expr]
    if isinstance(expr, relax.Tuple):
        return [x for f in expr.fields for x in _returned_vars(f)]
    return []
