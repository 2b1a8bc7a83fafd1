"""What runs the pipeline itself: the config check, the plan before downloads and the code
hash that reruns a job when its library code changes."""
