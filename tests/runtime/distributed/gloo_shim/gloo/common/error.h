// Test-only stand-in for gloo/common/error.h (see README.md): nothing from it is used.
#pragma once
