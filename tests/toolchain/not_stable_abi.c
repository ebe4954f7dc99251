/* A module that scripts/check-symbols --abi3 must refuse: one function outside the stable ABI
   (PyCode_NewEmpty), one in it only from CPython 3.11 (PyType_GetName). */
#include <Python.h>

void* outside_the_stable_abi(void) { return (void*)&PyCode_NewEmpty; }
void* after_the_floor(void) { return (void*)&PyType_GetName; }
