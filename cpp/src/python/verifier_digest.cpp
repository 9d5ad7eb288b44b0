// _C.plan.VERIFIER_CPP_DIGEST and VERIFIER_CPP_SOURCES: which C++ sources the plan verifier's
// verdict depends on and a digest of them at build time (CMakeLists.txt computes it), so that
// forestcc.plan.proof.verifier_version changes when they do.
#include "python/module.hpp"
#include "python/verifier_digest.hpp"

namespace py = pybind11;

namespace forestcc::python {

void bindVerifierDigest(py::module_& plan) {
  plan.attr("VERIFIER_CPP_DIGEST") = kVerifierCppDigest;
  py::list sources;
  for (const char* source : kVerifierCppSources) sources.append(source);
  plan.attr("VERIFIER_CPP_SOURCES") = py::tuple(sources);
}

}  // namespace forestcc::python
