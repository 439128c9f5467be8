"""The Ray executor: a job's workers as Ray actors in placement groups on a Ray cluster."""
