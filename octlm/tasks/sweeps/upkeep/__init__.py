"""A sweep after it is made (torch-free): grown with more seeds, grid values or draws, each drawn by the sweep's own
sampler, and healed by queueing its failed or stopped trials again (``mending``: ``sweep extend``, ``sweep retry``);
moved to the node-local homes of a job array and back (``shipping``: ``sweep pack``, ``sweep unpack``).
"""
