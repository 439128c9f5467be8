"""corral.protocol: the contract between an executor and the job it runs, torch-free.

Both sides import it - the executors and the service on one side, `corral.train` inside the
job on the other - so it imports nothing of either and no torch:

* `env`: the environment variables a worker is started with (`WorkerEnv`, the rendezvous;
  `JobConfig`, what the job is told about itself) and the exit statuses it answers with;
* `report`: the progress report a job writes and the executor reads (`Reporter`, `read_report`);
* `inplace`: the files of the in-place resize handshake (`ResizeRequest`, ready markers);
* `early`: the start gate of early initialisation (`wait_for_start`), for corral.train and for
  plain scripts that allow it;
* `files`: crash-safe writes (temporary file, fsync, rename) the others are written with.
"""
