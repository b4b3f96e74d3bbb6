// Run a fusion-tuner package from C++ with the TVM runtime shipped in the apache-tvm wheel; no Python.
//
//   unzip model.ftpkg model.so                      (a .ftpkg is a zip: manifest.json, model.so, ...)
//   ./run_package model.so input.bin 1x3x224x224 output.bin [CALLERS]
//
// Reads one float32 input (raw little-endian, the shape given as AxBxC), runs the Relax VM's `main` on the CPU
// and writes the first output as raw float32. build.sh compiles it; tests/test_cpp_example.py checks it against
// ONNX Runtime.
//
// Threads: a VM is one caller's at a time (its memory pool is not thread-safe: concurrent calls crashed in
// StorageObj::AllocTensor). Share one VM behind a mutex, as here with CALLERS > 1 (each call already runs on
// every core of TVM's pool), or give each thread a VM of its own. With CALLERS, that many threads call the VM
// 25 times each and every output must equal the first.
#include <dlpack/dlpack.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/function.h>

#include <cstdint>
#include <mutex>
#include <thread>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::vector<int64_t> ParseShape(const std::string& text) {
  std::vector<int64_t> dims;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, 'x')) dims.push_back(std::stoll(item));
  return dims;
}

// Host memory for the input: the runtime reads it in place (64-byte aligned, as TVM's own allocator does).
struct HostAlloc {
  void AllocData(DLTensor* t) {
    size_t n = tvm::ffi::GetDataSize(*t);
    t->data = std::aligned_alloc(64, (n + 63) / 64 * 64);
  }
  void FreeData(DLTensor* t) { std::free(t->data); }
};

std::vector<char> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) {
    std::cerr << "usage: " << argv[0] << " model.so input.bin SHAPE(1x3x224x224) output.bin [CALLERS]\n";
    return 2;
  }
  int callers = argc == 6 ? std::atoi(argv[5]) : 1;
  try {
    constexpr int kPooledAllocator = 2;  // tvm.runtime.vm.VirtualMachine.POOLED_ALLOCATOR
    tvm::ffi::Module lib = tvm::ffi::Module::LoadFromFile(argv[1]);
    tvm::ffi::Module vm = lib->GetFunction("vm_load_executable").value()().cast<tvm::ffi::Module>();
    // the device the kernels run on, then the host (shape functions); both with the pooled allocator
    vm->GetFunction("vm_initialization").value()(static_cast<int>(kDLCPU), 0, kPooledAllocator,
                                                  static_cast<int>(kDLCPU), 0, kPooledAllocator);
    tvm::ffi::Function run = vm->GetFunction("main").value();

    std::vector<int64_t> shape = ParseShape(argv[3]);
    DLDataType f32{kDLFloat, 32, 1};
    DLDevice cpu{kDLCPU, 0};
    tvm::ffi::Tensor input = tvm::ffi::Tensor::FromNDAlloc(HostAlloc(), tvm::ffi::ShapeView(shape.data(), shape.size()), f32, cpu);
    std::vector<char> bytes = ReadFile(argv[2]);
    size_t expected = 4;
    for (int64_t d : shape) expected *= static_cast<size_t>(d);
    if (bytes.size() != expected) {
      std::cerr << argv[2] << ": " << bytes.size() << " bytes, the shape needs " << expected << "\n";
      return 2;
    }
    std::memcpy(input.data_ptr(), bytes.data(), bytes.size());

    tvm::ffi::Any result = run(input);
    // one output is a tensor, several a tuple: write the first (on the CPU, so its data is host memory)
    tvm::ffi::Tensor output = result.as<tvm::ffi::Tensor>().has_value()
                                  ? result.cast<tvm::ffi::Tensor>()
                                  : result.cast<tvm::ffi::Array<tvm::ffi::Any>>()[0].cast<tvm::ffi::Tensor>();
    size_t n = static_cast<size_t>(output.numel()) * 4;
    std::ofstream(argv[4], std::ios::binary).write(static_cast<const char*>(output.data_ptr()),
                                                   static_cast<std::streamsize>(n));
    std::cout << "wrote " << argv[4] << " (" << n / 4 << " float32)\n";
    if (callers > 1) {
      std::vector<float> first(static_cast<const float*>(output.data_ptr()),
                               static_cast<const float*>(output.data_ptr()) + n / 4);
      std::mutex vm_lock;  // one call at a time on the shared VM
      int differing = 0;
      std::vector<std::thread> threads;
      for (int t = 0; t < callers; ++t) {
        threads.emplace_back([&] {
          for (int i = 0; i < 25; ++i) {
            std::lock_guard<std::mutex> hold(vm_lock);
            tvm::ffi::Any r = run(input);
            tvm::ffi::Tensor o = r.as<tvm::ffi::Tensor>().has_value()
                                     ? r.cast<tvm::ffi::Tensor>()
                                     : r.cast<tvm::ffi::Array<tvm::ffi::Any>>()[0].cast<tvm::ffi::Tensor>();
            if (std::memcmp(o.data_ptr(), first.data(), n) != 0) ++differing;
          }
        });
      }
      for (std::thread& th : threads) th.join();
      std::cout << callers << " callers x 25 calls: " << differing << " outputs differ\n";
      if (differing) return 1;
    }
  } catch (const std::exception& err) {
    std::cerr << "error: " << err.what() << "\n";
    return 1;
  }
  return 0;
}
