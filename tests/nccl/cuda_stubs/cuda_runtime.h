/* Stand-in for the CUDA runtime header that NCCL's nccl.h includes, so the shim's tests compile
 * against the real nccl.h on a machine without the CUDA toolkit. Only the handle types nccl.h
 * uses; the shim never dereferences them. */
#ifndef FORESTCC_TEST_CUDA_RUNTIME_STUB_H
#define FORESTCC_TEST_CUDA_RUNTIME_STUB_H
#include <stddef.h> /* the real header brings size_t */
#define CUDART_VERSION 13000
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
#endif
