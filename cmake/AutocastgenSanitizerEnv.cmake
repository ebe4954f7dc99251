# The environment tests with PyTorch need under the sanitizers (presets tsan and asan-torch), and
# the launcher TSan needs on kernels with wide mmap randomisation.
#
# autocastgen_sanitizer_test_env(<env_var> <launcher_var>) sets <env_var> to a list for
# set_tests_properties(ENVIRONMENT) and <launcher_var> to a command prefix (possibly empty).
function(autocastgen_sanitizer_test_env env_var launcher_var)
  set(env "")
  set(launcher "")
  set(supp_dir "${PROJECT_SOURCE_DIR}/tests/stress")
  if(AUTOCASTGEN_SANITIZE MATCHES "thread")
    # libtorch and libc10 (pip wheel) are not instrumented: TSan sees their calls to intercepted
    # functions (memset, free, pthread_*) but not their atomics, which gives one false report inside
    # libtorch (the shared AccumulateGrad node of a weight); tsan.supp drops it by libtorch function
    # name, never by autocastgen code or by whole library. Any other report fails the test (exit 66).
    # Not ignore_noninstrumented_modules=1: it would also drop the intercepted accesses that
    # uninstrumented libstdc++ (out-of-line std::string and container code) makes for our code.
    # history_size=4: longer per-thread history, so reports keep the other access's stack.
    list(APPEND env "TSAN_OPTIONS=suppressions=${supp_dir}/tsan.supp:second_deadlock_stack=1:history_size=4")
    # gcc's TSan cannot map its shadow memory when the kernel randomises mmap with more than 28
    # bits (vm.mmap_rnd_bits, 32 on recent distributions); running without ASLR sidesteps that.
    # Only where it works: container seccomp profiles may forbid changing the personality.
    find_program(AUTOCASTGEN_SETARCH setarch)
    if(AUTOCASTGEN_SETARCH)
      execute_process(COMMAND "${AUTOCASTGEN_SETARCH}" "${CMAKE_HOST_SYSTEM_PROCESSOR}" -R true
                      RESULT_VARIABLE setarch_result OUTPUT_QUIET ERROR_QUIET)
      if(setarch_result EQUAL 0)
        set(launcher "${AUTOCASTGEN_SETARCH}" "${CMAKE_HOST_SYSTEM_PROCESSOR}" -R)
      endif()
    endif()
  endif()
  if(AUTOCASTGEN_SANITIZE MATCHES "address")
    # LeakSanitizer on (the default with ASan on Linux, stated here); lsan.supp is for one-time
    # libtorch allocations and is empty with PyTorch 2.15.0: every leak is reported.
    list(APPEND env
      "ASAN_OPTIONS=detect_leaks=1:strict_init_order=1:check_initialization_order=1:detect_stack_use_after_return=1"
      "LSAN_OPTIONS=suppressions=${supp_dir}/lsan.supp:print_suppressions=0")
  endif()
  if(AUTOCASTGEN_SANITIZE MATCHES "undefined")
    list(APPEND env "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
  endif()
  set(${env_var} "${env}" PARENT_SCOPE)
  set(${launcher_var} "${launcher}" PARENT_SCOPE)
endfunction()
