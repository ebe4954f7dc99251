# Finds the PyTorch installed in the machine's Python (pip) and describes it as imported targets:
#   autocastgen::torch        headers + libtorch/libtorch_cpu/libc10, and the std::string ABI that
#                             torch was built with (-D_GLIBCXX_USE_CXX11_ABI=0 or 1), which code
#                             linking it must use
# and these cache variables:
#   AUTOCASTGEN_TORCH_DIR, AUTOCASTGEN_TORCH_VERSION, AUTOCASTGEN_TORCH_CUDA_VERSION,
#   AUTOCASTGEN_NATIVE_FUNCTIONS (the op schemas shipped inside torchgen),
#   AUTOCASTGEN_TORCH_CXX11_ABI (1 or 0: torch.compiled_with_cxx11_abi()).
# We do not use TorchConfig.cmake: for a CUDA wheel it insists on finding cuDNN and friends even
# for CPU-only consumers, and we only need headers and three libraries.
#
# Note [building against a release's headers]
# With -DAUTOCASTGEN_TORCH_RELEASE_DIR=<folder of the release cache> (scripts/torch-releases path
# VERSION: include/, torchgen/, version.txt) the torch parts are built against that release's
# headers with no torch installed: the libraries are linked against empty stand-ins that carry
# libtorch's, libc10's, ... sonames, so the result names them as its needed libraries and the
# dynamic linker binds it to the torch that imported it (a library already loaded answers for its
# soname). The release's CUDA version and string ABI, which its wheel would say, come from
# AUTOCASTGEN_TORCH_RELEASE_CUDA ("" for none) and the release (the old ABI before 2.7). This is
# how scripts/wheel builds one runtime per release; nothing links a program to the stand-ins.
set(AUTOCASTGEN_TORCH_RELEASE_DIR "" CACHE PATH
  "Build the torch parts against this release cache folder's headers instead of the Python's torch (scripts/wheel)")
set(AUTOCASTGEN_TORCH_RELEASE_CUDA "" CACHE STRING
  "With AUTOCASTGEN_TORCH_RELEASE_DIR: the CUDA version of the release's wheel (empty: no CUDA parts)")

function(autocastgen_find_torch)
  if(AUTOCASTGEN_TORCH_RELEASE_DIR)
    _autocastgen_torch_from_release_dir()
    return()
  endif()
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
# The release the schemas belong to, read where autocastgen's CLI reads it: beside torchgen.
tg_parent = os.path.dirname(os.path.dirname(tg.origin))
schemas_release = ""
for evidence in (os.path.join(tg_parent, "torch", "version.py"), os.path.join(tg_parent, "version.txt")):
    if os.path.exists(evidence):
        text = open(evidence).read()
        found = {}
        exec(text, found) if evidence.endswith(".py") else found.update(__version__=text.strip())
        schemas_release = found.get("__version__", "")
        break
print(schemas_release)
# The std::string ABI, from torch itself (PyPI's wheels before 2.7 use the old one). A failed
# import is reported after the release check: a torchgen of another release (PYTHONPATH) can
# break it, and then the mismatch is the message to give.
try:
    import torch
    print(int(torch.compiled_with_cxx11_abi()))
except Exception as error:
    print("error: " + " ".join(str(error).replace(";", ",").split()))
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
  list(GET lines 4 schemas_release)
  list(GET lines 5 cxx11_abi)
  set(AUTOCASTGEN_TORCH_DIR "${torch_dir}" CACHE INTERNAL "")
  set(AUTOCASTGEN_TORCH_VERSION "${torch_version}" CACHE INTERNAL "")
  set(AUTOCASTGEN_TORCH_CUDA_VERSION "${torch_cuda}" CACHE INTERNAL "")
  set(AUTOCASTGEN_NATIVE_FUNCTIONS "${native_functions}" CACHE INTERNAL "")
  if(NOT EXISTS "${native_functions}")
    message(FATAL_ERROR "autocastgen: the installed torchgen has no ${native_functions}")
  endif()
  _autocastgen_check_one_release("${torch_dir}" "${native_functions}" "${schemas_release}")

  if(NOT cxx11_abi MATCHES "^[01]$")
    message(FATAL_ERROR
      "autocastgen: importing torch with ${Python3_EXECUTABLE} (to read its C++ string ABI, "
      "torch.compiled_with_cxx11_abi()) failed: ${cxx11_abi}")
  endif()
  set(AUTOCASTGEN_TORCH_CXX11_ABI "${cxx11_abi}" CACHE INTERNAL "")

  if(NOT TARGET autocastgen::torch)
    _autocastgen_torch_interface("${torch_dir}" ${cxx11_abi})
    set(libs)
    foreach(lib torch torch_cpu c10)
      find_library(lib_${lib} NAMES ${lib} PATHS "${torch_dir}/lib" NO_DEFAULT_PATH REQUIRED)
      list(APPEND libs ${lib_${lib}})
    endforeach()
    # --no-as-needed keeps libtorch linked: it holds the static registrations we rely on.
    # libstdc++ goes first: the 2.11 wheel's libtorch.so exports a broken copy of std::filesystem
    # (remove_all there calls through a null pointer), and the first library of the link line
    # that defines a symbol is the one the dynamic linker binds.
    target_link_libraries(autocastgen::torch INTERFACE "-Wl,--no-as-needed" -lstdc++ ${libs} "-Wl,--as-needed")
    # The build machine's torch, for a build tree and a package built here; never in the wheel's
    # parts, which find torch beside them ($ORIGIN, Note [the wheel's parts]).
    if(NOT AUTOCASTGEN_WHEEL_PART)
      target_link_options(autocastgen::torch INTERFACE "-Wl,-rpath,${torch_dir}/lib")
    endif()
  endif()
  if(NOT TARGET autocastgen::torch_python)  # autocastgen._C (python/CMakeLists.txt)
    add_library(autocastgen::torch_python INTERFACE IMPORTED GLOBAL)
    target_link_libraries(autocastgen::torch_python INTERFACE "${torch_dir}/lib/libtorch_python.so")
  endif()
  # The wheel's CUDA libraries, for libraries that must bind to the CUDA build of torch.
  if(torch_cuda AND EXISTS "${torch_dir}/lib/libtorch_cuda.so" AND NOT TARGET autocastgen::torch_cuda)
    add_library(autocastgen::torch_cuda INTERFACE IMPORTED GLOBAL)
    target_link_libraries(autocastgen::torch_cuda INTERFACE
      "-Wl,--no-as-needed" "${torch_dir}/lib/libtorch_cuda.so" "${torch_dir}/lib/libc10_cuda.so" "-Wl,--as-needed")
  endif()
  if(cxx11_abi)
    set(abi_note "")
  else()
    set(abi_note ", pre-C++11 string ABI")
  endif()
  message(STATUS "autocastgen: PyTorch ${torch_version} (CUDA ${torch_cuda}${abi_note}) at ${torch_dir}")
endfunction()

# Our torch targets reuse the precompiled <ATen/ATen.h> and <torch/library.h> made with their kind's
# flags (Note [precompiled torch headers] in runtime/CMakeLists.txt): about 6 CPU seconds less per
# file. Not for add_autocast_ops() in users' projects: theirs is their build.
function(autocastgen_torch_pch)
  foreach(target IN LISTS ARGN)
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "EXECUTABLE")  # position-independent code as the one precompiled copy
      target_compile_options(${target} PRIVATE -fPIC)
    endif()
    target_precompile_headers(${target} REUSE_FROM autocastgen_torch_pch_pic)
  endforeach()
endfunction()

# The headers and the schemas must be one release: wrappers generated from one release's schemas
# do not compile (or silently miss ops) against another's headers.
function(_autocastgen_check_one_release torch_dir native_functions schemas_release)
  # torch/version.h holds the numbers up to 2.14; from 2.15 it includes torch/headeronly/version.h.
  set(version_lines "")
  foreach(version_h "${torch_dir}/include/torch/csrc/api/include/torch/version.h" "${torch_dir}/include/torch/headeronly/version.h")
    if(EXISTS "${version_h}")
      file(STRINGS "${version_h}" found REGEX "define TORCH_VERSION_(MAJOR|MINOR) ")
      list(APPEND version_lines ${found})
    endif()
  endforeach()
  string(REGEX REPLACE ".*MAJOR ([0-9]+).*MINOR ([0-9]+).*" "\\1.\\2" headers_release "${version_lines}")
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" schemas_minor "${schemas_release}")
  if(NOT schemas_minor STREQUAL headers_release)
    message(FATAL_ERROR
      "autocastgen: the op schemas and the C++ headers are of different PyTorch releases:\n"
      "  schemas ${native_functions}: ${schemas_release} (read beside its torchgen package)\n"
      "  headers ${torch_dir}/include: ${headers_release} (torch/version.h)\n"
      "Both come from ${Python3_EXECUTABLE}; make its torch and torchgen one installation (check "
      "PYTHONPATH), or pick another interpreter with -DAUTOCASTGEN_PYTHON=/path/to/python.")
  endif()

endfunction()

# Note [building against a release's headers]: the release's facts from its cache folder, and
# stand-ins for its libraries.
function(_autocastgen_torch_from_release_dir)
  set(dir "${AUTOCASTGEN_TORCH_RELEASE_DIR}")
  set(native_functions "${dir}/torchgen/packaged/ATen/native/native_functions.yaml")
  if(NOT EXISTS "${dir}/version.txt" OR NOT EXISTS "${native_functions}" OR NOT IS_DIRECTORY "${dir}/include")
    message(FATAL_ERROR "autocastgen: AUTOCASTGEN_TORCH_RELEASE_DIR=${dir} is not a folder of the release cache "
                        "(version.txt, include/, torchgen/): scripts/torch-releases fetch VERSION makes one")
  endif()
  file(STRINGS "${dir}/version.txt" version LIMIT_COUNT 1)
  _autocastgen_check_one_release("${dir}" "${native_functions}" "${version}")
  # PyPI's wheels use the pre-C++11 string ABI before 2.7 (docs/releases.md).
  if(version VERSION_LESS 2.7)
    set(cxx11_abi 0)
  else()
    set(cxx11_abi 1)
  endif()
  set(AUTOCASTGEN_TORCH_DIR "${dir}" CACHE INTERNAL "")
  set(AUTOCASTGEN_TORCH_VERSION "${version}" CACHE INTERNAL "")
  set(AUTOCASTGEN_TORCH_CUDA_VERSION "${AUTOCASTGEN_TORCH_RELEASE_CUDA}" CACHE INTERNAL "")
  set(AUTOCASTGEN_NATIVE_FUNCTIONS "${native_functions}" CACHE INTERNAL "")
  set(AUTOCASTGEN_TORCH_CXX11_ABI "${cxx11_abi}" CACHE INTERNAL "")

  # Empty libraries named and sonamed as the release's: a link against them records the name.
  set(stand_in_source "${PROJECT_BINARY_DIR}/torch-stand-ins/stand_in.c")
  file(CONFIGURE OUTPUT "${stand_in_source}" CONTENT "/* An empty stand-in for a PyTorch library (Note [building against a release's headers]). */\n")
  foreach(lib torch torch_cpu c10 torch_python c10_cuda)
    add_library(autocastgen_stand_in_${lib} SHARED "${stand_in_source}")
    set_target_properties(autocastgen_stand_in_${lib} PROPERTIES OUTPUT_NAME ${lib} LINKER_LANGUAGE C
      LIBRARY_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/torch-stand-ins")
  endforeach()
  _autocastgen_torch_interface("${dir}" ${cxx11_abi})
  # A stand-in defines nothing, so --as-needed would drop it: what links these links with
  # --no-as-needed throughout (a link option comes before every library; CMake reorders and
  # merges repeated flags among the libraries, so a --no-as-needed/--as-needed pair there is not
  # kept around its libraries).
  target_link_options(autocastgen::torch INTERFACE "LINKER:--no-as-needed")
  target_link_libraries(autocastgen::torch INTERFACE -lstdc++
    autocastgen_stand_in_torch autocastgen_stand_in_torch_cpu autocastgen_stand_in_c10)
  add_library(autocastgen::torch_python INTERFACE IMPORTED GLOBAL)
  target_link_libraries(autocastgen::torch_python INTERFACE autocastgen_stand_in_torch_python)
  if(AUTOCASTGEN_TORCH_RELEASE_CUDA)
    add_library(autocastgen::c10_cuda INTERFACE IMPORTED GLOBAL)
    target_link_libraries(autocastgen::c10_cuda INTERFACE autocastgen_stand_in_c10_cuda)
  endif()
  if(cxx11_abi)
    set(abi_note "")
  else()
    set(abi_note ", pre-C++11 string ABI")
  endif()
  message(STATUS "autocastgen: PyTorch ${version}'s headers (CUDA ${AUTOCASTGEN_TORCH_RELEASE_CUDA}${abi_note}) at ${dir}, "
                 "its libraries by name only")
endfunction()

# autocastgen::torch without its libraries, which the caller links: the release's headers, C++20
# (PyTorch 2.15's headers use std::bit_width, <=>, starts_with; consumers inherit that) and its
# string ABI (code that passes std::string to or from libtorch must use it, as TorchConfig says too;
# for an old-ABI torch the whole build must, cmake/AutocastgenCxxAbi.cmake).
function(_autocastgen_torch_interface torch_dir cxx11_abi)
  add_library(autocastgen::torch INTERFACE IMPORTED GLOBAL)
  target_include_directories(autocastgen::torch SYSTEM INTERFACE
    "${torch_dir}/include" "${torch_dir}/include/torch/csrc/api/include")
  target_compile_features(autocastgen::torch INTERFACE cxx_std_20)
  target_compile_definitions(autocastgen::torch INTERFACE _GLIBCXX_USE_CXX11_ABI=${cxx11_abi})
endfunction()
