// One binding file per public header; each defines a bind* function called from bind_module.cpp.
#pragma once

#include <pybind11/pybind11.h>

namespace forestcc::python {
void bindErrors(pybind11::module_& m);
void bindBootstrap(pybind11::module_& m);
void bindMemory(pybind11::module_& m);
void bindChannel(pybind11::module_& m);
void bindCommunicator(pybind11::module_& m);
void bindPlan(pybind11::module_& m);
// The verifier's clock join (verifier_clocks.cpp), into the plan submodule.
void bindVerifierClocks(pybind11::module_& plan);
// Which clock components each rank keeps (verifier_coaccess.cpp), into the plan submodule.
void bindVerifierCoAccess(pybind11::module_& plan);
// The verifier's chunk records (verifier_memory.cpp), into the plan submodule.
void bindVerifierMemory(pybind11::module_& plan);
// The digest of the C++ sources the verifier's verdict depends on (verifier_digest.cpp).
void bindVerifierDigest(pybind11::module_& plan);
// The tree compiler's op emission (plan_tree_compiler.cpp), into the plan submodule.
void bindTreeCompiler(pybind11::module_& plan);
void bindCollectives(pybind11::module_& m);
void bindSim(pybind11::module_& m);  // the plan simulator's event loop (cpp/src/sim/)
// The CPU reductions at each instruction-set level, for tests (bind_reduce.cpp).
void bindReduceKernels(pybind11::module_& m);

// Raises RuntimeError when this thread is running Python signal handlers from inside a blocked
// forestcc wait: a collective or send/recv there would wait on the call it interrupted.
void refuseInsideSignalHandler(const char* what);
}  // namespace forestcc::python
