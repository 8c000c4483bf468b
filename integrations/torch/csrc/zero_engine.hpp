// zero_engine.hpp - defines zcoll_torch._C.ZeroEngine (zero_engine.cpp) in the extension module.
#pragma once

#include <pybind11/pybind11.h>

namespace zcoll_torch {
void defineZeroEngine(pybind11::module_& m);
}
