// Conversion between the in-memory plan (forestcc/plan.hpp) and its format-v1 JSON form as a
// Python dict (what forestcc.plan.load returns and forestcc.plan.save writes). Validation with
// file/rank/worker/step messages is forestcc.plan.format's job; dictToPlan assumes a validated
// dict and only refuses what the fixed-size Op record cannot hold.
#pragma once

#include <pybind11/pybind11.h>

#include "forestcc/plan.hpp"

namespace forestcc::python {

pybind11::dict planToDict(const plan::Plan& plan);
plan::Plan dictToPlan(const pybind11::dict& plan);

}  // namespace forestcc::python
