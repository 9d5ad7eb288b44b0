/* Stand-in (see cuda_runtime.h here): nccl.h includes it; the tests need nothing from it. */
