// MARLAAS_CHECK: asserts an invariant in every build type (unlike assert(), which Release drops).
// A failed check is a bug, never an expected condition: it prints where and aborts.
#pragma once

#include <cstdio>
#include <cstdlib>

#define MARLAAS_CHECK(cond)                                                               \
  do {                                                                                    \
    if (__builtin_expect(!(cond), 0)) {                                                   \
      std::fprintf(stderr, "%s:%d: invariant violated: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)
