// Carries the precompiled torch headers that executables reuse (Note [precompiled torch headers]
// in runtime/CMakeLists.txt); it compiles to nothing.
