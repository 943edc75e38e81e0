"""The shared GPU queue: Slurm (and home-grown queues) entries judged against rules."""
