"""The sizes that bound welchpeaks' working memory, in one place (bytes). Each module that cuts
work to fit reads its size here, at the time it cuts (so a test may change one).

The user's own bound is ``max_memory=`` (``--memory`` on the command line); these are the
defaults and the fixed sizes under it.
"""

#: auto prefers executions (and the fusion gate graphs) needing at most this much working
#: memory when any can run the call: the cost models are measured on batches that fit the
#: caches and do not reach gigabytes of intermediates
LEAN_BYTES = 256 << 20
#: the least ``max_memory=`` a call accepts (a budget under it cannot hold a useful block)
MIN_BUDGET_BYTES = 1 << 20
#: signals read from a source per block when no ``max_memory`` is given
SOURCE_BLOCK_BYTES = 64 << 20
#: frames of a recording copied side by side per executor call in ``track`` (a block's working set)
BLOCK_BYTES = 32 << 20
#: signal one dask task may hold: whole rows up to this are read by one task
TASK_BYTES = 256 << 20
#: samples one unit of a command-line job reads (a quarter of the least ``--memory``, 16 MiB)
UNIT_BYTES = 4 << 20
#: k may exceed the bins (the extra slots come back empty), but not by more result memory than this
MAX_EMPTY_SLOT_BYTES = 256 << 20
