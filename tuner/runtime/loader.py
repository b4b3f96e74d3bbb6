"""Deployment: load a `.ftpkg` and run it. Needs only the TVM runtime, numpy and this file's imports.

    model = tuner.load("model.ftpkg")          # checks checksums, TVM version, target vs this host
    out = model(x)                              # positional, or model(input_name=x); returns {name: array}

No ONNX, ONNX Runtime, Relax frontend or MetaSchedule import happens here (a test checks it).
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
import time

import numpy as np

from tuner.core.errors import TunerError
from tuner.core.native_log import quiet_native_stderr
from tuner.runtime import float_mode
from tuner.runtime.compat import _check_library, _sweep_stale_copies, check_compatible
from tuner.runtime.inputs import check_range, check_shape, make_inputs, mib, spec_nbytes
from tuner.runtime.package import LIBRARY, read_package
from tuner.runtime.profile import profile_calls
from tuner.runtime.threads import ThreadGovernor, usable_cpus

# CPU: posix_memalign failing surfaces as std::bad_alloc; CUDA: cudaMalloc's "out of memory"
_OUT_OF_MEMORY = re.compile(r"out of memory|bad_alloc|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation", re.I)


def out_of_memory(err: Exception, path: str, manifest: dict, device, doing: str) -> TunerError | None:
    """A clear error for an allocation failure on the device (None for any other error)."""
    if not _OUT_OF_MEMORY.search(str(err)):
        return None
    need = manifest.get("memory") or {}
    io_bytes = sum(spec_nbytes(t) for t in manifest.get("inputs", []) + manifest.get("outputs", []))
    msg = f"{path}: out of memory on {'the GPU' if device.dlpack_device_type() == 2 else 'the host'} while {doing}"
    if need:
        msg += (
            f"; one inference needs about {mib(need['weights_bytes'])} of weights, "
            f"{mib(need['intermediate_bytes'])} of intermediates and {mib(io_bytes)} of inputs and outputs"
        )
    try:
        total, free = device.total_global_memory, device.available_global_memory
        if total:
            msg += f"; the device has {mib(total)}" + (f", {mib(free)} free" if free is not None else "")
    except Exception:  # not every device type reports its memory
        pass
    return TunerError(msg, "free device memory (other processes), or rebuild for smaller inputs (--input-shape)")


def _configure_threads(manifest: dict) -> None:
    # TVM's pool halves the CPU count on x86 (assumes SMT); use what the package was tuned with, within the CPUs
    # this process may use (taskset, a container's quota), unless the user set it. Must happen before the first
    # parallel kernel creates the pool.
    threads = min(manifest.get("num_threads") or usable_cpus(), usable_cpus())
    os.environ.setdefault("TVM_NUM_THREADS", str(threads))


class Model:
    """A loaded package. Call it with numpy arrays; get {output name: array}."""

    def __init__(
        self, path: str, manifest: dict, vm, device, params, variants: dict | None = None, flush_denormals=False
    ):
        self.path = path
        self.manifest = manifest
        self._vm = vm
        # packages for a range of shapes: {input shapes: VM} of the builds pinned to the tune shapes; every other
        # shape in the range runs on `vm`, the build over symbolic dimensions
        self._variants = variants or {}
        self._device = device
        self._params = params
        self._buffers: dict[tuple, tuple] = {}  # input shapes -> (device buffers, numpy views over them)
        # One call at a time: the VM's memory pool and our input buffers are one per Model, and each call already
        # runs on every core of TVM's pool (calls side by side would only share those cores). Checking the inputs
        # happens outside it.
        self._lock = threading.Lock()
        # calls in progress, and the one worker thread that runs every call once two have overlapped
        self._in_flight, self._calls_lock, self._executor = 0, threading.Lock(), None
        self._threads = ThreadGovernor(_pool_threads(), enabled=device.dlpack_device_type() == 1)  # CPU only
        self.flush_denormals = bool(flush_denormals)  # MXCSR's FTZ/DAZ on the pool for each call (float_mode)
        self.inputs = manifest["inputs"]
        self.outputs = manifest["outputs"]
        self.input_names = [i["name"] for i in self.inputs]
        self.output_names = [o["name"] for o in self.outputs]

    @classmethod
    def from_executable(cls, executable, manifest: dict, label: str = "in-memory build") -> Model:
        """A model straight from a build's VM executable (no package on disk), described by `manifest`."""
        import tvm
        from tvm.runtime.vm import VirtualMachine

        device = tvm.cpu()
        return cls(label, manifest, VirtualMachine(executable, device), device, None)

    def __repr__(self):
        return (
            f"<tuner.Model {os.path.basename(self.path)}: {self.manifest['model']['file']} for "
            f"{self.manifest['target']['key']}, fusion={self.manifest['fusion']}, "
            f"{self.manifest.get('precision', 'float32')}, kernels={self.manifest['kernels']}>"
        )

    def _bind(self, args, kwargs) -> list[np.ndarray]:
        if len(args) > len(self.inputs):
            raise TunerError(
                f"{len(args)} inputs given, the model takes {len(self.inputs)}: {', '.join(self.input_names)}"
            )
        given = dict(zip(self.input_names, args))
        for name, value in kwargs.items():
            if name not in self.input_names:
                raise TunerError(f"no input named {name!r}", f"inputs are: {', '.join(self.input_names)}")
            if name in given:
                raise TunerError(f"input {name!r} given twice")
            given[name] = value
        missing = [n for n in self.input_names if n not in given]
        if missing:
            raise TunerError(
                f"missing inputs: {', '.join(missing)}",
                "pass every input: " + ", ".join(f"{i['name']} {i['dtype']}{i['shape']}" for i in self.inputs),
            )
        arrays = []
        sizes: dict[str, tuple[int, str]] = {}  # symbolic dimension -> (size, input that set it)
        for spec in self.inputs:
            arr = np.asarray(given[spec["name"]])
            check_shape(arr, spec, sizes)
            if arr.dtype != np.dtype(spec["dtype"]):
                raise TunerError(
                    f"input {spec['name']!r}: dtype {arr.dtype}, the package expects {spec['dtype']}",
                    f"convert it, e.g. x.astype('{spec['dtype']}')",
                )
            if "range" in spec and arr.size:
                check_range(arr, spec)
            arrays.append(np.asarray(arr, order="C"))  # ascontiguousarray would make a 0-d input 1-d
        return arrays

    def _to_device(self, arrays):
        """The inputs copied into device buffers allocated once per Model and input shape (a new tensor per call
        cost 3x the copy; a ranged package keeps the buffers of its last few shapes). On the CPU the copy goes
        through a numpy view of each buffer: np.copyto ~1 us against TVM's copyfrom ~6 us per input, ~12 of a
        0.06 ms call on the synthetic transformer. Called under the Model's lock."""
        import tvm

        key = tuple(a.shape for a in arrays)
        try:
            if key not in self._buffers:
                if len(self._buffers) >= _KEPT_SHAPES:
                    self._buffers.pop(next(iter(self._buffers)))
                buffers = [tvm.runtime.empty(a.shape, str(a.dtype), self._device) for a in arrays]
                self._buffers[key] = (buffers, [_host_view(b) for b in buffers])
            buffers, views = self._buffers[key]
            for buf, view, a in zip(buffers, views, arrays):
                if view is None:
                    buf.copyfrom(a)
                else:
                    np.copyto(view, a, casting="no")
            return buffers
        except Exception as err:
            raise out_of_memory(err, self.path, self.manifest, self._device, "copying the inputs") or err  # noqa: B904

    def _vm_for(self, tensors):
        """The build for these input shapes: the one pinned to them when they are a tune shape, else the generic."""
        if not self._variants:
            return self._vm
        return self._variants.get(tuple(tuple(t.shape) for t in tensors), self._vm)

    def _invoke(self, tensors):
        args = list(tensors) + (list(self._params) if self._params is not None else [])
        try:
            return self._vm_for(tensors)["main"](*args)
        except Exception as err:
            raise out_of_memory(err, self.path, self.manifest, self._device, "running the model") or err  # noqa: B904

    def _collect(self, result) -> dict[str, np.ndarray]:
        items = list(result) if not hasattr(result, "numpy") else [result]
        if len(items) != len(self.outputs):  # nested tuple outputs are flattened in graph order
            flat = []

            def walk(x):
                if hasattr(x, "numpy"):
                    flat.append(x)
                else:
                    for y in x:
                        walk(y)

            walk(result)
            items = flat
        return {spec["name"]: _to_numpy(item) for spec, item in zip(self.outputs, items)}

    def __call__(self, *args, **kwargs) -> dict[str, np.ndarray]:
        """Run one inference; safe to call from any number of threads (calls run one after another; once two
        have overlapped, all on one worker thread: see _run_on_one_thread)."""
        arrays = self._bind(args, kwargs)
        if self._executor is None:
            with self._calls_lock:
                self._in_flight += 1
                overlapping = self._in_flight > 1
            try:
                if not overlapping:  # one caller at a time, whichever thread: run here, no hand-off
                    return self._run(arrays)
                self._run_on_one_thread()
            finally:
                with self._calls_lock:
                    self._in_flight -= 1
        return self._executor.submit(self._run, arrays).result()

    def _run(self, arrays) -> dict[str, np.ndarray]:
        with self._lock:
            n = self._threads.pick()
            t0 = time.perf_counter()
            with float_mode.Scope(self.flush_denormals):
                out = self._collect(self._invoke(self._to_device(arrays)))
            self._threads.record(n, time.perf_counter() - t0)
            return out

    def _run_on_one_thread(self) -> None:
        """Once calls overlap, every call runs on one worker thread. TVM keeps a thread pool per calling thread,
        and a pool's workers spin for a while after each call: callers on their own pools took each other's
        cores (a 0.06 ms CNN: 11,000 calls/s from one thread, 3,200/s from 16). The hand-off costs a sequential
        caller ~0.1 ms, so a lone caller, in any thread, runs in place."""
        import concurrent.futures

        with self._calls_lock:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ftpkg")

    def benchmark(self, *args, repeat: int = 20, warmup: int = 3, **kwargs) -> list[float]:
        """Per-run latencies in ms, inputs already on the device, after warm-up."""
        arrays = self._bind(args, kwargs)
        with self._lock:
            return self._benchmark(self._to_device(arrays), repeat, warmup)

    def _benchmark(self, tensors, repeat: int, warmup: int) -> list[float]:
        self._threads.fixed()
        with float_mode.Scope(self.flush_denormals):
            return self._timed(tensors, repeat, warmup)

    def _timed(self, tensors, repeat: int, warmup: int) -> list[float]:
        for _ in range(warmup):
            self._invoke(tensors)
        self._device.sync()
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            self._invoke(tensors)
            self._device.sync()
            times.append((time.perf_counter() - t0) * 1e3)
        return times

    def profile(self, *args, repeat: int = 5, order: list | None = None, **kwargs) -> list[dict]:
        """Time every call the VM makes (kernels and runtime built-ins), median over `repeat` runs after a
        warm-up: [{name, calls (per run), ms (per run), share}], slowest first. `order` receives the call
        sequence of one inference."""
        arrays = self._bind(args, kwargs)
        with self._lock:
            self._threads.fixed()
            tensors = self._to_device(arrays)
            vm = self._vm_for(tensors)
            with float_mode.Scope(self.flush_denormals):
                per_call = profile_calls(vm, self._device, lambda: self._invoke(tensors), repeat, order=order)
        whole = sum(c["total_us"] for c in per_call.values()) or 1.0
        rows = [
            {"name": k, "calls": c["calls"], "ms": c["total_us"] / 1e3, "share": c["total_us"] / whole}
            for k, c in per_call.items()
        ]
        return sorted(rows, key=lambda r: -r["ms"])

    def random_inputs(self, seed: int = 0, fill: str = "random") -> dict[str, np.ndarray]:
        return make_inputs(self.inputs, seed=seed, fill=fill)


_KEPT_SHAPES = 8  # input buffers kept per Model, one set per recent input shape


def _pool_threads() -> int:
    """The package's thread count: TVM_NUM_THREADS (set at load), as every fresh TVM pool starts with; not the
    calling thread's pool as it is now, which another Model may have switched to one thread for a busy neighbour
    (a Model loaded then took 1 as its count and ran on one thread for good)."""
    import tvm

    configured = os.environ.get("TVM_NUM_THREADS", "").strip()
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    return int(tvm.get_global_func("runtime.NumThreads")())


def _host_view(tensor) -> np.ndarray | None:
    """A numpy array over a host tensor's memory (None on a GPU, or for a dtype numpy lacks, e.g. bfloat16)."""
    if tensor.device.dlpack_device_type() != 1:  # kDLCPU
        return None
    try:
        return np.from_dlpack(tensor)
    except Exception:
        return None


def _to_numpy(tensor) -> np.ndarray:
    """An output as a numpy array of its own: a copy through a DLPack view on the host (~0.5 us against 6 us
    for Tensor.numpy()); a copy, as an output may alias an input buffer or a weight that the next call reuses."""
    view = _host_view(tensor)
    return tensor.numpy() if view is None else view.copy()


def load(path: str, device: str | None = None, flush_denormals: bool = False) -> Model:
    """Load a package for deployment; see the module docstring. Raises only TunerError (with a hint).
    `flush_denormals`: run every call with subnormal floats flushed to zero (x86 CPUs; `runtime.float_mode`)."""
    try:
        return _load(path, device, flush_denormals)
    except TunerError:
        raise
    except Exception as err:  # anything not foreseen above is still this package's problem, said in one line
        last = str(err).strip().splitlines()[-1][:200] if str(err).strip() else ""
        raise TunerError(
            f"{path}: cannot load ({type(err).__name__}: {last})", "rebuild the package; report it if it persists"
        ) from err


def _load(path: str, device: str | None, flush_denormals: bool = False) -> Model:
    manifest, members = read_package(path)
    _configure_threads(manifest)
    import tvm
    from tvm.runtime.vm import VirtualMachine

    kind = check_compatible(manifest, device, path)
    if flush_denormals and (kind == "cuda" or not float_mode.supported()):
        raise TunerError(
            f"{path}: flush_denormals is built for x86 CPUs (MXCSR), not for {kind if kind == 'cuda' else 'this CPU'}",
            "load it without flush_denormals",
        )
    dev = tvm.cuda(0) if kind == "cuda" else tvm.cpu(0)
    if kind == "cuda":
        from tuner.runtime.device_code import serve

        serve(path, manifest, members)  # TVM compiles CUDA at load: hand it the packaged fatbin instead
    _sweep_stale_copies()
    vm = _load_vm(path, manifest, members[LIBRARY], dev, tvm, VirtualMachine)
    variants = {
        tuple(tuple(v["shapes"][i["name"]]) for i in manifest["inputs"]): _load_vm(
            path, manifest, members[v["library"]], dev, tvm, VirtualMachine
        )
        for v in manifest.get("variants") or []
    }
    return Model(path, manifest, vm, dev, None, variants, flush_denormals)


def _load_vm(path: str, manifest: dict, library: bytes, dev, tvm, VirtualMachine):  # noqa: N803
    _check_library(library, path)
    # the pid in the name lets a later load remove this copy if the process dies inside dlopen
    with tempfile.TemporaryDirectory(prefix=f"ftpkg-{os.getpid()}-") as tmp:
        lib_path = os.path.join(tmp, LIBRARY)
        with open(lib_path, "wb") as f:
            f.write(library)
        try:
            with quiet_native_stderr():  # TVM warns "Scope Loaded:" on fd 2 for every function it loads
                lib = tvm.runtime.load_module(lib_path)
        except Exception as err:
            raise TunerError(
                f"{path}: cannot load its library ({str(err).strip().splitlines()[-1]})",
                "the package was built for another platform; rebuild it here",
            ) from err
    try:
        with quiet_native_stderr():
            return VirtualMachine(lib, dev)  # weights are constants in the library: they reach the device here
    except Exception as err:
        raise (
            out_of_memory(err, path, manifest, dev, "loading the weights")
            or TunerError(
                f"{path}: its library does not hold a Relax VM executable ({str(err).strip().splitlines()[-1][:200]})",
                "the package is damaged; rebuild it",
            )
        ) from err
