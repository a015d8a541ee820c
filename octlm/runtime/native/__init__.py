"""What a process loads or sets in native code before torch works: glibc's allocator kept from unmapping freed
memory (``allocator``), the folder ``torch.compile`` keeps its graphs in (``compile_cache``), MKL's Intel code
path on any vendor's processor for the ``cross-vendor`` tier (``mkl``), and the checks of the folders and files
both load code from (``private``: this user's alone, made 0700). Torch-free.
May import: ``core``, ``config``.
"""
