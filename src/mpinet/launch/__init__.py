"""Where and how jobs run: launch lines for the MPI in use, SLURM partitions, time limits, the pilot."""
