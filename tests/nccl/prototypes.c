/* Compiled (never run) by test_nccl_shim.py: the wheel's nccl.h first, then every prototype of
 * forestcc's nccl.h. C rejects a function redeclared with another type, so any prototype of the
 * shim that differs from NCCL's fails the build. */
#include "nccl.h"
#define FORESTCC_NCCL_FUNCTIONS_ONLY
#include FORESTCC_NCCL_HEADER
int main(void) { return 0; }
