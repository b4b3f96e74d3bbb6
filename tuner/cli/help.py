"""All help text in one place."""

PROG = "fusion-tuner"
DESCRIPTION = "Tune every fused kernel of an ONNX model with TVM, and see what fusion bought you."

COMMANDS = {
    "check": "validate an ONNX model and list everything that would stop a build",
    "compile": "build an ONNX model into one deployable package (.ftpkg)",
    "run": "run a package: latency table, and verification against ONNX Runtime",
    "info": "what a package is: model, target, fusion, tuned kernels, inputs, outputs, memory (nothing is run)",
    "plan": "show the fusion plan: which ONNX nodes go into which kernel, and why boundaries were drawn",
    "tune-model": "tune every fused kernel with MetaSchedule, then build the tuned package",
    "db": "inspect or merge tuning databases",
    "compare": "build with several fusion strategies and report what fusion changes",
}

INPUT_SHAPE = (
    "bind an input's shape, NAME:DIMS (e.g. input:1x3x224x224); a dimension may be a range LO..HI "
    "(x:1x3x48x32..2048): the package then runs every shape in it; repeatable, and one flag may hold "
    "several space-separated NAME:DIMS"
)
TUNE_SHAPE = (
    "with a range in --input-shape: a shape to tune and build for, NAME:DIMS inside the range (inputs that share "
    "its dimensions may be left out); repeatable, one flag per shape; default: the middle and the top of the ranges"
)
CONST = (
    "freeze an input to a constant before import: NAME=VALUE for a scalar (e.g. sr=16000, so branches on it fold),"
    " NAME=V1,V2,... for a 1-D shape, axes or pads input"
)
TARGET = (
    "auto (CUDA if a GPU is present, else LLVM for this CPU), llvm, llvm:MCPU, cuda (arch of the local "
    "GPU) or cuda:sm_XX"
)
DTYPE = (
    "compute precision: float32 (as exported, default) or float16 (fp16 compute with fp32 accumulation in "
    "matmul/conv; on CUDA this enables tensor cores). Verification against ONNX Runtime loosens to match"
)
LAYOUT = (
    "layout of the convolutions: auto (nhwc on CPU, nchw on CUDA), nchw (ONNX's), nhwc, or nchwc (channel blocks "
    "of one vector, as ONNX Runtime's MLAS)"
)
FUSION = "fusion strategy: {known}; compose with '+' (default: tvm)"
MEASURE_CACHE = (
    "CPU: how each candidate is timed. warm (default): back-to-back calls with hot caches (MetaSchedule's way); "
    "flush: one call after each flush of the kernel's weights and output from the caches, as a model run leaves "
    "them (see docs/performance.md: on light ResNet-50 it did not make the tuned model faster)"
)
RANK = (
    "CPU: how the budget is shared among kernels. headroom (default): by each kernel's time in the model above its "
    "compute floor (its FLOPs at this CPU's measured peak), so kernels already near the peak get little; model: "
    "by its time in the model, from the default build profiled with the model's own weights before tuning; "
    "alone: by its isolated time x calls (MetaSchedule's random-data measurements)"
)
SPACE = (
    "CPU: the design space searched. template (default): the default schedule's own space first (its rules in its "
    "order; the seed record is a point of it and the search mutates its tile sizes, unroll and parallel extent), "
    "TVM's llvm space for kernels it cannot build; tvm: TVM's llvm space"
)
RPC = (
    "measure candidates on devices registered with an RPC tracker (python -m tvm.exec.rpc_tracker; "
    "rpc_server --tracker HOST:PORT --key KEY on each device) instead of on this machine"
)
SCHEDULES = (
    "warm start: 'auto' (default) copies the best records and cost model of the curated schedules/<target-key>/ "
    "library for the kernels it knows; 'none' starts cold; or a tuning database folder to start from"
)
DB = (
    "tuning database folder to apply (records for another target are refused); default: the model's database in "
    "the per-user cache when tune-model has filled one; 'none' builds untuned"
)
TUNE_DB = (
    "tuning database folder (default: the per-user cache, $FUSION_TUNER_CACHE or ~/.cache/fusion-tuner, "
    "db/<model>-<sha8>/<target-key>/, which compile and compare find too)"
)
OUTPUT_PKG = "package file to write (.ftpkg); written to a temp file and renamed"
JSON = "print a JSON document instead of tables"
DEBUG = "show full tracebacks on errors"
VERBOSE = "more detail: TVM's own logs (MetaSchedule's while tuning) and each command's extras (plan: TVM kernel names)"
QUIET = "print nothing but errors: the exit code is the result (for scripts)"
VERIFY = (
    "ONNX model to run in ONNX Runtime on the same inputs and compare against; on CPU, ONNX Runtime is also timed "
    "run for run beside the package"
)
FILL = "inputs to generate when --inputs is not given (random is seeded and repeatable)"
REPEAT = "timed runs after warm-up"
DURATION = "time for this long instead of --repeat runs (10s, 1m), as trtexec does: p50/p90/p99 and throughput"
PROFILE = (
    "time every kernel the package launches (and, with --verify, every ONNX Runtime node on the same inputs "
    "and threads): where the time goes"
)
FLUSH_DENORMALS = (
    "run with subnormal floats (|x| < 1.2e-38) read and written as zero on every thread (x86: MXCSR FTZ/DAZ), as "
    "ONNX Runtime's set_denormal_as_zero; Python: tuner.load(path, flush_denormals=True)"
)
TOLERANCE = (
    "outputs pass when |tvm - ort| <= atol*max(1, max|ort|) + rtol*|ort| elementwise "
    "(rtol 1e-3, atol 1e-4); integer outputs must match exactly"
)

COMPARE_FUSION = (
    "comma-separated strategies to compare (default: none,tvm); every name is checked before any build; known: {known}"
)
COMPARE_DB = "apply one shared tuning database to every variant (kernels it does not cover keep default schedules)"
COMPARE_TRIALS = "tune every variant with this many trials, each into its own database under OUTPUT/db/"
COMPARE_ORT = "time ONNX Runtime on the same inputs, interleaved with the variants, as a reference column"
COMPARE_OUTPUT = "report folder: report.md, report.html, report.json, kernels.csv, variants.csv and the plots"
COMPARE_FORCE = "replace the output folder if it exists and is not empty"
PEAK_GFLOPS = "the roofline's compute ceiling in GFLOP/s (default: measured here with a float32 matmul)"
PEAK_GBPS = "the roofline's bandwidth in GB/s (default: measured here with a parallel copy)"
COMPARE_EXIT = (
    "exit status: 0 all variants built and ran, 3 some variant failed (the report is still written), 2 bad input"
)

# every command's exit status; README "Exit codes" repeats this table
EXIT_CODES = {
    0: "success",
    1: "a negative verdict: check found the model not buildable, a verification against ONNX Runtime failed",
    2: "bad input or environment: a file, a flag, a package, a full disk (the message names it, with a hint)",
    3: "partly done: compare wrote its report, but some variant failed to build or run (the report says which)",
    4: "internal error: a bug in fusion-tuner or TVM (rerun with --debug and report it)",
    130: "interrupted (Ctrl-C); a tuning database stays consistent",
}
