// Build jobs
