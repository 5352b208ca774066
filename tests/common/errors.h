#pragma once
// Helpers for tests that check the kind and message of tutti::Error.

#include <gtest/gtest.h>

#include <string>

#include "tutti/error.h"

namespace tutti::testing {

// "Kind: message", for failure output.
inline std::string what_of(const Error& e) { return std::string(error_kind_name(e.kind())) + ": " + e.message(); }

// Runs f, which must throw tutti::Error; returns the error (or records a
// failure and returns an Internal placeholder).
template <typename F>
Error expect_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no tutti::Error was thrown";
  return Error(ErrorKind::Internal, "(none)");
}

}  // namespace tutti::testing

// Expects `needle` in `haystack` (strings), showing both when it is not.
#define EXPECT_CONTAINS(haystack, needle)                          \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) \
      << "expected \"" << (needle) << "\" in \"" << (haystack) << "\""
