"""What a process loads or sets in native code before torch works: glibc's allocator kept from unmapping freed
memory (``allocator``), the folder ``torch.compile`` keeps its graphs in (``compile_cache``), and MKL's Intel code
path on any vendor's processor for the ``cross-vendor`` tier (``mkl``). Torch-free.
May import: ``core``, ``config``.
"""
