# Finds the PyTorch installed in the machine's Python (pip) and describes it as imported targets:
#   autocastgen::torch        headers + libtorch/libtorch_cpu/libc10 (pip wheels use the default,
#                             new libstdc++ ABI, so no ABI define is needed)
# and these cache variables:
#   AUTOCASTGEN_TORCH_DIR, AUTOCASTGEN_TORCH_VERSION, AUTOCASTGEN_TORCH_CUDA_VERSION,
#   AUTOCASTGEN_NATIVE_FUNCTIONS (the op schemas shipped inside torchgen).
# We do not use TorchConfig.cmake: for a CUDA wheel it insists on finding cuDNN and friends even
# for CPU-only consumers, and we only need headers and three libraries.
function(autocastgen_find_torch)
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c [=[
import importlib.util, os, sys
spec = importlib.util.find_spec("torch")
tg = importlib.util.find_spec("torchgen")
if spec is None or tg is None:
    sys.exit("torch or torchgen is not importable")
torch_dir = os.path.dirname(spec.origin)
ns = {}
exec(open(os.path.join(torch_dir, "version.py")).read(), ns)
print(torch_dir)
print(ns["__version__"])
print(ns.get("cuda") or "")
print(os.path.join(os.path.dirname(tg.origin), "packaged", "ATen", "native", "native_functions.yaml"))
]=]
    RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR
      "autocastgen: PyTorch was not found for ${Python3_EXECUTABLE} (${err}).\n"
      "Run scripts/setup to install the pinned version (scripts/requirements.txt), "
      "or configure with -DAUTOCASTGEN_WITH_TORCH=OFF to build only the generator and kernels.")
  endif()
  string(REPLACE "\n" ";" lines "${out}")
  list(GET lines 0 torch_dir)
  list(GET lines 1 torch_version)
  list(GET lines 2 torch_cuda)
  list(GET lines 3 native_functions)
  set(AUTOCASTGEN_TORCH_DIR "${torch_dir}" CACHE INTERNAL "")
  set(AUTOCASTGEN_TORCH_VERSION "${torch_version}" CACHE INTERNAL "")
  set(AUTOCASTGEN_TORCH_CUDA_VERSION "${torch_cuda}" CACHE INTERNAL "")
  set(AUTOCASTGEN_NATIVE_FUNCTIONS "${native_functions}" CACHE INTERNAL "")
  if(NOT EXISTS "${native_functions}")
    message(FATAL_ERROR "autocastgen: the installed torchgen has no ${native_functions}")
  endif()


  if(NOT TARGET autocastgen::torch)
    add_library(autocastgen::torch INTERFACE IMPORTED GLOBAL)
    set(libs)
    foreach(lib torch torch_cpu c10)
      find_library(lib_${lib} NAMES ${lib} PATHS "${torch_dir}/lib" NO_DEFAULT_PATH REQUIRED)
      list(APPEND libs ${lib_${lib}})
    endforeach()
    target_include_directories(autocastgen::torch SYSTEM INTERFACE
      "${torch_dir}/include" "${torch_dir}/include/torch/csrc/api/include")
    # --no-as-needed keeps libtorch linked: it holds the static registrations we rely on.
    target_link_libraries(autocastgen::torch INTERFACE "-Wl,--no-as-needed" ${libs} "-Wl,--as-needed")
    target_link_options(autocastgen::torch INTERFACE "-Wl,-rpath,${torch_dir}/lib")
    # PyTorch 2.15's headers use C++20 (std::bit_width, <=>, starts_with); consumers inherit that.
    target_compile_features(autocastgen::torch INTERFACE cxx_std_20)
  endif()
  # The wheel's CUDA libraries, for libraries that must bind to the CUDA build of torch.
  if(torch_cuda AND EXISTS "${torch_dir}/lib/libtorch_cuda.so" AND NOT TARGET autocastgen::torch_cuda)
    add_library(autocastgen::torch_cuda INTERFACE IMPORTED GLOBAL)
    target_link_libraries(autocastgen::torch_cuda INTERFACE
      "-Wl,--no-as-needed" "${torch_dir}/lib/libtorch_cuda.so" "${torch_dir}/lib/libc10_cuda.so" "-Wl,--as-needed")
  endif()
  message(STATUS "autocastgen: PyTorch ${torch_version} (CUDA ${torch_cuda}) at ${torch_dir}")
endfunction()
