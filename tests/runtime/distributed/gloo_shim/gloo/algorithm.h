// Test-only stand-in for gloo/algorithm.h (see README.md): nothing from it is used.
#pragma once
