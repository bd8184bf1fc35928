"""How a cohort is trained: the executors (loop, vmap, CUDA graphs, blocks of steps), the precision and device memory
they run in, and the ranks a cohort is shared over."""
