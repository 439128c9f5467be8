"""Simulator at datacenter scale (issue 18): whole traces, policy rounds, parallel sweeps.

Prints one table: each figure, its target, and its ratio to the same measurement of the code at
commit 9f38669 (before the speed work) when `--before FILE` names a `--save` of that run:

    git archive 9f38669 | tar -x -C /tmp/corral-9f38669
    PYTHONPATH=/tmp/corral-9f38669/src python benchmarks/speed/bench_scale.py --save before.json
    python benchmarks/speed/bench_scale.py --before before.json --save after.json

Only APIs that exist before and after the change are used for the measurements both sides make;
the sweep rows (worker processes, Ray) exist only after it. Sections (`--only a,b`):

* `engine` -- tiresias-las, 2,000 jobs submitted at t=0 on 8,000 GPUs (2000x4), 5 rounds: the
  engine's bookkeeping, not the policy (since `Policy.stands_until`, the policy is asked at 2
  of the 5 rounds; the time, 1.3 s here, did not change: the first round dominates).
* `rounds` -- median `decide` time of optimus (4,000 jobs, 16,000 GPUs: 4000x4) and pollux (2,000
  jobs, 2,048 GPUs: 512x4) rounds, all jobs at t=0 (catalog truth), over the first rounds.
* `day` -- the busiest day of the Philly trace (3,987 jobs) on 2,048 GPUs under tiresias-las,
  optimus and pollux (`--day-policies`).
* `trace` -- the whole Philly trace (74,428 jobs) on 2,048 GPUs under fifo and tiresias-las
  (`--trace-policies`; pollux and sia too, sia on a three-type `--trace-cluster` such as
  `k80:256x4,p100:128x4,v100:128x4`), with the process's peak RSS.
Every `day` and `trace` run prints its restarts per job, the p50/p99 of its `decide` calls and,
for pollux, the rounds it did not search (`corral.policies.pollux.settled`), and writes a
progress line to stderr at least every 20 s.
* `placement` (after the change only) -- optimus's Theorem-1 placement of 4,000 jobs on 4000x4,
  the old per-job sort against `EvenPlacer`, in one run (placements checked identical).
* `matrix` -- the eight shared 160-job workloads under `--matrix-policies` (default all seven):
  serial in one process, `--jobs 2` worker processes, and Ray tasks on a local 2-node cluster.
* `windows` (only when named) -- the whole Philly trace as a sweep of consecutive windows
  (`--window-hours`, default a day) under `--window-policies` (default pollux), each window's
  jobs on an empty 512x4 cluster, in `--window-jobs` worker processes or as Ray tasks
  (`--ray-address`): the issue's "whole trace printed, as a sweep of windows if that is what it
  takes", for policies too slow to replay the trace in one piece here.

Targets (issue 18): whole trace fifo <= 30 s, tiresias-las <= 60 s; busiest day pollux <= 120 s,
optimus <= 60 s; optimus round <= 0.4 s, pollux round <= 0.1 s; matrix on 2 processes >= 1.8x.
Issue 45 (pollux, with its avg JCT no worse and restarts per job printed): busiest day <= 60 s,
whole trace <= 30 minutes.

Profile-driven notes (cProfile, 2-core shared machine; see the commit messages for the tables):
* `engine` at 9f38669: 30.2 s under cProfile, 27.0 s (89 %) in `Simulator._record` ->
  `best_isolated_jct` -> `epoch_gains` -> the catalog's `noise_features`, 115,558 scalar calls
  at 150 us. The catalog now builds every epoch's features in one array pass
  (`CatalogApp.epoch_gains`, bit-identical): 8.2 s, the policy's own placement now the largest
  part. `Cluster.total_gpus`/`max_node_gpus` walked 2,000 nodes at every call (4 million
  generator steps, 2.1 s): now attributes.
* A 6,260-job Philly window under fifo (2,269 rounds, ~180 active jobs): the per-round work was
  `SimJob.advance` (37 %), `SimJob.view` (17 %), `_apply` (19 %: the GPU handover walked every
  node and every job at every round). `_apply` now touches only jobs whose assignment changes
  and the handover only the nodes they touch; a job re-measures its gradient statistics only
  when its (batch, epoch) changed (half the estimator calls). Views and advancing stay per
  active job per round: a policy sees every active job, and advancing a job at other instants
  would change its floating-point trajectory (the stored-reference test forbids that).
* optimus, 800 jobs at t=0 on 800x4, 5 rounds under cProfile (after the placement fix): 98 % of
  `decide` is `JobEstimator.throughput_params` -> `fit_throughput` (scipy L-BFGS-B, 2,256 fits
  at 0.17 s) -- each job refits its throughput model when it has run a new configuration, and
  at t=0 every job does so in the same rounds. The first round, before any fit, is the policy's
  own work: there Theorem-1 placement sorted all 4,000 nodes for each of 4,000 jobs; `EvenPlacer`
  keeps nodes bucketed by free GPUs (identical placements). The fits are `corral.perf`'s and
  their results must not change, so they were left as they are; pollux's rounds after the first
  are dominated by the same fits.
* Round 2 of the fits: the catalog truth is deterministic, so jobs of one application that ran
  the same configurations have bit-identical profiles: recorded from 200-job optimus and 100-job
  pollux rounds at t=0, 650 fits had 33 distinct inputs (4,000-job optimus, 5 rounds: 11,226
  fits, 27 distinct; busiest day under optimus: 10,425 fits, 66 distinct). `fit_throughput` now
  remembers fits by the exact bytes of their inputs and warm start (`_fit_memo`, LRU), so a hit
  is the same computation by construction. scipy's gradient is the objective's analytic one
  (`jac=True`), a few hundred evaluations of a handful of points per fit, where numpy's
  per-call overhead is the cost: the objective now computes each value once, reduces with
  `np.add.reduce` (what np.sum/np.mean call) and takes the masks precomputed per fit -- the
  same floating-point operations, 1.2-1.4x per evaluation; scipy's own wrapper is about a
  quarter of a fit and was left alone.
* With the fits memoised, optimus's t=0 rounds were 37 % `steps_per_epoch`: each job before its
  first epoch scanned every job for another of its application (4,000 x 4,000); `Optimus` now
  looks each application up once per round (`borrowed_epoch_steps`, same job, same arithmetic).
  The busiest day under optimus (cProfile, 113 s) was then 72 % `Optimus.predict` ->
  `predict_total_epochs` (the convergence fit): 73,479 calls, 312 distinct histories (jobs of
  one application at one batch size see the same curve). It is remembered by the exact bytes of
  its inputs too (`_predict_memo`). Day: 589.5 s (241.0 s CPU) -> 6.9 s (5.0 s CPU), same
  figures (3,908 rounds, avg JCT 1584 s), both at load average ~6-10 on the shared 2 cores;
  optimus round median 22.5 s (load ~1) -> 0.24 s (load ~7).
* pollux's rounds were then its genetic search (`pollux_search`, ~80 % of `decide`). Profile
  of the 2,000-job round (cProfile and a per-statement CPU timer over the 5 rounds, 42
  generations, at f9a4da3): `_trim` 30 % (element-level stable argsort, nonzero, scatter),
  `_merge`'s np.sort of (P, nodes, 5C) rows 17 %, `_pick` on int64 arrays 10 %, `_per_job`'s
  bincounts 12 %; outside the search, the dense current allocation (30 ms a round) and
  `Placement.from_dense` of every row (26 ms). Now: populations are stored slot-major
  (C, P, nodes) in int16, so a node's few slots are sorted and merged by sorting networks over
  contiguous columns (`slot_columns`); `_trim` works per (job, node) run, sorting only the runs
  of jobs on several nodes, by the same float key (quicksort on unique keys, stable on ties);
  one bincount gives K and N; fitness terms are computed once per speedup-table entry and
  looked up; the population's hashes are kept; the current allocation is a scatter, the
  decision reads the best slots' nonzero entries; a job's speedup table is kept while its
  model, grid and fair share are; jobs with identical goodput functions share their rows.
  Same draws in the same order and the same arithmetic: the 56 reference cells, five stored
  mid-size searches (`tests/sim/search_reference.py`) and the 5 rounds' decisions are
  unchanged. A generation 41-44 ms -> 12-13 ms CPU; `rounds` pollux median 0.53-0.79 s ->
  0.17-0.35 s (three alternating runs each, load 3.1-3.9; 0.55 s -> 0.14 s at load ~1.6).
  Left per generation (perf): numpy's random draws ~27 % (the same draws must be made: the
  array-parameter geometric and integers cost ~10 and ~7 ns each), bincount 8 %, and ~150
  array operations over the 204,800 slots and 200,000 (individual, job) entries, none above
  5 %; rounds 2-4 also refit 12 distinct throughput models (25-55 ms a round). The 0.1 s
  target is not met with exact results.
* The busiest day under pollux is not the search. cProfile of its first 2 hours (114 rounds,
  <= 225 active jobs), 48 s: the jobs' own agents 28 s (`SimJob._finish_epoch` ->
  `choose_batch`: 1,122 distinct L-BFGS-B throughput refits, 22 s, and 18,598 one-allocation
  `GoodputFunction.optimize` calls, 7 s), `Pollux.decide` 17 s, of which the speedup tables'
  `optimize_many` 7 s (a running job's goodput function changes every round with its gradient
  statistics, and 96 % of the rows differ) and the search 7.5 s. Whole day: 595.6 s (496.0 s
  CPU, load 3-5) -> 636.1 s (350.5 s CPU, load 5-7), same figures (1,668 rounds, avg JCT
  991 s); the <= 120 s target is far and needs the agents' refits to get cheaper.
* Session of 2026-11-26, on an Intel Xeon (Skylake-X, AVX-512) at 2.5 GHz, 2 cores, about
  1.5-2x slower than the AMD EPYC of the figures above. Busiest day under pollux, its CPU time
  split by plain timers (not cProfile): before 925 s CPU (search 327 s, the speedup tables'
  `optimize_many` 274 s, throughput fits 187 s). Fixes, each exact:
  - Speedup tables: the throughput model tells node counts apart only as one or several
    (Eq. 9), so each K is computed once for every N >= 2 (`DISTINCT_NODE_COUNTS`; 8x fewer
    rows for a 16-node grid), and Eq. 13's candidate batches and their throughput are kept per
    throughput model (`corral.perf.candidates`): a running job's new gradient statistics
    (every round) then cost its efficiencies only. 274 s -> 38 s.
  - Fits: `scipy.optimize.minimize` spent about as long per evaluation in its Python wrapper as
    in the objective; `corral.perf.lbfgsb` drives scipy's compiled L-BFGS-B step with the same
    loop (self-checked bit for bit against minimize on first use). 187 s -> 146 s.
  - Search (py-spy over 30 captured searches of the day): numpy's geometric draws with an
    array p took 12 % of a generation (a log1p per draw); the growth requests' p is one value
    per individual, so the same inversion numpy does runs on standard-exponential draws with
    log1p once per individual (the same numbers and generator state, checked against numpy
    on first use): 3.2x on that call. Slot index arrays are made in one pass and shared
    within mutate and repair. 33 -> 28 ms a generation on those searches.
  All 56 stored reference cells unchanged (`--check-reference`). Whole busiest day, same
  1,656 rounds: 925 s CPU (1,440 s wall, load 2-4) -> 492 s CPU (596 s wall, load 0.3-3):
  search 327 -> 265 s, tables 274 -> 32 s, fits 187 -> 115 s. 1.9x, and still 4x the
  <= 120 s target on this machine: the search is now over half the day (28 ms a generation
  for ~200 jobs on 512 nodes, 42 ms for the 2,000-job round, whose median stays 0.45-0.5 s
  here against 0.1 s), spread over ~150 array operations of which none is above 10 %, and the
  fits a quarter (~90 evaluations each of an objective of ~60 numpy calls on a handful of
  points). What would reach the targets: compiled search operators (the draws kept in numpy)
  and a compiled objective whose exp/log match numpy's kernels, or accepting remade
  references for fewer generations or fits.
* Session of 2026-11-27, same Intel machine: the optimus round (4,000 jobs, 16,000 GPUs), 0.48-0.57 s
  median here (0.24 s on the AMD). cProfile of rounds 2-5: `Optimus.step_times` 65 % of
  `decide` -- after each refit a job rebuilt its step-time table (78,032 `JobSpec.user_batch`
  calls, 11,226 `iteration_time` calls in 4 rounds), although fits are remembered by their
  inputs and jobs of one application get the same model. The table depends only on the model,
  the node size, the GPU cap and the user's batch fields: `ModelStepTimes` keeps one per such
  key (bounded LRU, read-only arrays). Round median 0.48-0.57 -> 0.26 s (load ~2.5); busiest
  day under optimus 9.9 -> 7.7 s, same figures (3,908 rounds, avg JCT 1593 s on this CPU);
  the 16 optimus and optimus-oracle reference cells unchanged.
  Tried and not kept: every pollux search operator compiled with numba (per node, the draws
  kept in numpy in the same order and shapes; identical results on the 5 stored search
  cases x 3 seeds with warm starts and on 35 searches captured from the busiest day and the
  2,000-job round). 1.13x a generation on the 2,000-job round (34.2 -> 30.2 ms) and 1.15x
  on the day's searches (21.4 -> 18.6 ms), measured alternating in one process: the per-node
  operators are branch-bound (25-90 ns per node and operator), where numpy's slot-major
  passes are already vectorised; not worth a new 60 MB dependency and a 26 s first compile.
  A compiled version would have to keep the slot-major, branch-free form (fused passes
  over contiguous slot columns) to gain more.
* Session of 2026-11-27, same Intel machine: the whole trace under fifo and tiresias-las.
  Every job waits exactly one round and is never preempted, so the per-round work is per
  running job: 6.57 M running-job views under fifo (140 a round, 46,976 rounds), 13.16 M under
  tiresias-las (87 a round, 150,919 rounds). Profiles at 240823b: fifo, whole trace (py-spy):
  the snapshot's views 32 % (JobView's 18-field keyword call alone 2.4x a positional one),
  `SimJob.advance` 31 % (its gradient-statistics measurement after every advance 10 %),
  `Fifo.decide` 14 %, `_apply` 7 %, `check_decision` 4 %. tiresias-las, a 30-day window
  (7,256 jobs, cProfile, 186 s): `decide` 42 % (`gang_allocate` 27 %, of which
  `JobSpec.user_batch` per kept job 9 %), `check_decision`'s walk over 512 nodes 10 %, views
  18 %, advance 17 %, `_reassign` 8 %. Fixes, each exact (records of 30-day windows
  byte-identical; `--check-reference` 0 of 56 cells differ):
  - Views: fields passed by position (`VIEW_FIELDS`, checked at import), the Assignment
    object shown again while placement and fixed batch are unchanged, the metrics tuple
    remade only when the list grew; one shared empty `Placement`.
  - `advance` measures gradient statistics only when their (batch, epoch) may have changed:
    an epoch crossed in this advance, or the configuration changed since the last one
    (every such change drops `_rate`); otherwise the measurement finds its key unchanged
    and does nothing (655k -> 222k calls in the fifo window; tests/sim/test_job_caches.py).
  - `user_batch` remembered per its five inputs; `check_decision` notes over-capacity nodes
    as it counts; tiresias: queue by bisect, promotion read once a round, `spread_fill` by
    `list.index` per free count instead of a keyed sort of 512 nodes; `gang_allocate` hands a
    kept job its view's own assignment (then `keeps` matches by identity); fifo and
    `consolidated` read attributes and distinct free counts instead of properties and
    512-node comprehensions; the engine removes finished jobs in place.
  Figures (same 46,976 / 150,919 rounds, avg JCT 10,542 / 10,657 s, 74,428 finished): the
  host's speed drifted ~1.7x within the session (240823b's fifo: 108.6 s CPU at 00:00,
  178.8 s at 00:40, load ~1), so before and after ran side by side, one per core (load
  1-2): fifo 186.2 s (178.8 s CPU) -> 85.5 s (85.0 s CPU), 2.1x, and again 132.6 s
  (132.3 s CPU) -> 77.4 s (76.9 s CPU), 1.7x; tiresias-las 508.9 s
  (506.9 s CPU) -> 233.6 s (226.3 s CPU), 2.2x (the after run ended first; the before run's
  last 4 minutes ran alone). Earlier, on the faster host: fifo 108.6 -> 64.1 s CPU,
  tiresias-las 267.5 -> 150.8 s CPU (py-spy runs of the intermediate commits). Peak RSS
  756 -> 796 MiB. Not met: 30 s and 60 s would need ~4.5 us per running job per round; what
  is left is that per-job work itself (fifo after, py-spy: advance 37 % with its epoch
  crossings and metric records, views 28 %, decide 10 %, _apply 7 %), which the contract
  keeps: a policy sees a fresh view of every active job every round, and a job advances at
  the same instants. Fewer views (a policy saying which jobs or fields it reads) or a
  compiled engine would be the next step; both change more than this session's exact scope.
* Session of 2026-11-27 (second), same Intel machine: the whole trace under pollux, as the
  `windows` sweep. One day window alone is not cheap: window 54 (190 jobs, 1,588 rounds)
  took 219 s, window 55 (185 jobs, 1,435 rounds) 188 s, ~0.13 s a round. cProfile of window
  54's first 6 hours (356 rounds, 49 s): `genetic_search` 90 % of it, ~6 generations a round
  (the patience stop) at ~20 ms each (`mutate` 9 ms, `repair` 5 ms, `evaluate` 3 ms), because
  the population's slot arrays span all 512 nodes whatever the number of jobs: a round costs
  nearly the same with 20 jobs as with 200. The whole trace is about 150,000 pollux rounds
  (101 day windows of ~1,500), so ~5.4 hours of CPU here, ~2.7 hours on 2 processes; it was
  not run. A search over only the nodes any individual uses (plus room for the jobs' largest
  demands) would cut that cost with the job count, but its draws would differ from today's
  and so would every pollux figure: it needs the reference figures renewed, a team decision.
  fifo through the same sweep (2 processes, 101 windows): 68 s wall, 106 s CPU.
* Session of 2026-11-27 (third), same Intel machine: that narrower search, without renewing
  any stored figure. Recorded over window 54's first 6 hours: a median 3 active jobs, but the
  highest node they held was node 501 (the growth mutation spreads them over the whole
  cluster). `corral.policies.pollux.nodes`: on clusters of more than 64 nodes a round searches
  the nodes jobs hold, the nodes its warm start uses, and empty nodes of each size until the
  jobs' caps fit; 16-node clusters are searched whole, so the 8 pollux reference cells and the
  stored searches are unchanged (checked: 0 of 8 cells differ). The highest node a job held
  then fell to a median 60 (p90 94) in those 6 hours; over the busiest day the search spanned
  a median 123 nodes, p90 512 (busy hours need the whole cluster). Figures (CPU time): window
  54 (190 jobs, 1,588 rounds; before and after side by side, one per core) 253.8 s -> 84.0 s,
  avg JCT 1896 -> 1889 s; busiest day 492 s (the previous session's run) -> 417.5 s, 1,661
  rounds, avg JCT 991 -> 939 s. The schedules on large clusters
  differ (other draws), not the policy. The pollux sweep can now stop and resume
  (`--window-results`); its busy days still cost 120-670 s a window here. The sweep ran
  (2 processes) through windows 0-61 of 109 at commit 3a923df, kept in
  `benchmarks/results/pollux_windows_3a923df.jsonl`: 50,487 of the 74,428 jobs, all finished,
  10,201 s CPU, avg JCT 1601 s, slowest window 667 s, peak RSS 604 MiB. The other 47 windows
  (23,941 jobs, quieter days) are left; to finish with the same code:
  `git worktree add /tmp/w 3a923df && cd /tmp/w && PYTHONPATH=src python benchmarks/speed/bench_scale.py
  --only windows --window-jobs 2 --window-results <this repo>/benchmarks/results/pollux_windows_3a923df.jsonl`.
* Session of 2026-11-27 (fourth), same Intel machine: the whole trace under tiresias-las again.
  py-spy at 24f8ea4: `decide` 37 %, the snapshot's views 20 %, advancing 22 %, `_apply` and
  `check_decision` 11 %: asked at every one of its 150,919 rounds with ~87 jobs each, although
  without promotion 2D-LAS's order moves only when a running job's service crosses a queue's
  bound (its FIFO key moving at its first start provably changes nothing: `_standing`).
  `Policy.stands_until()`: after `decide`, the time before which the same decision would come
  back if nothing arrives or finishes; `should_decide` skips asking before it, in the engine
  and the live loop, and such rounds still count as rounds (the figures keep their meaning).
  tiresias-las stands until a running job may cross its bound (1 s early); a test asks it at
  every round and checks the answer, and that skipping keeps every job's books. Whole trace:
  54 k of the 151 k rounds ask it (a 30-day window: 6 k of 45 k); the rest are rounds with an
  arrival or a finish. Side by side, one per core: 115.6 s -> 86.5 s CPU, same 150,919 rounds
  and avg JCT 10,657 s; the 32 reference cells of fifo, srtf and both Tiresias unchanged.
  Tried and not kept: the same promise for arrivals under fifo's head-of-line blocking (an
  arrival queues behind the waiting head). On this trace fifo's queue never waits (each job
  starts the round after it arrives, 2,048 GPUs); on the busiest week on 512 GPUs it saved
  185 of 4,993 calls, within noise. What is left under both is per-job work at rounds with
  an event, which the exactness contract keeps (above).
  The pollux window sweep finished (same code, 3a923df; windows 62-108 resumed from the kept
  file, 1-2 processes): the whole trace as 101 day windows with jobs (of 109 days), each from
  an empty 512x4 cluster: 74,428 jobs, all finished, 139,330 rounds, 16,466 s CPU over the
  cells, avg JCT 1,652 s, slowest window 550 s CPU (2,803 jobs), peak RSS of a cell 604 MiB;
  kept in `benchmarks/results/pollux_windows_3a923df.jsonl`. Wall times of two windows there
  include a pause of the sweep (SIGSTOP while CI ran); their CPU times do not.
  Whether the narrower node search changed pollux's schedules beyond its draws: the busiest
  day, avg JCT by seed (the policy's `seed`): whole-cluster search (6c3f826) 991 s (seed 0),
  884 s (seed 1); nodes in use (this code) 939, 916, 918 s (seeds 0-2). The spread between
  seeds covers the difference.
* Session of 2026-11-27 (fifth), same Intel machine: fifo and tiresias-las asked while nothing
  waits. Counted with a wrapper on the whole trace: 21,496 of fifo's 46,976 decisions and
  28,512 of tiresias-las's 53,992 were made with every active job running, where a gang
  scheduler admitting by fixed GPU count that never moves an admitted job can only answer
  "every job keeps what it runs". `Keeps.RUNNING_WHEN_NONE_WAITS` (fifo, srtf, both
  Tiresias) says so; `should_decide` returns KEEP there (a round, not asked; the engine
  re-judges interference at a change as a decision would), in the engine and the live loop
  (which asks when nodes joined or left). tests/policies/test_keeping_running_jobs.py asks
  anyway in 7 settings and compares every job's books. Side by side, one per core: fifo
  49.1 -> 40.6 s CPU, tiresias-las 79.8 -> 55.8 s CPU. py-spy of fifo then: advancing 41 %,
  of which the estimator's `observe_grad` at epoch boundaries 12 % (2.39 M calls) and
  `_finish_epoch` 9 % (3.93 M epochs; the finish predictions' dry runs cross as many again).
  Reported statistics are now one shared frozen object per distinct pair
  (`floored_grad_stats`), and a duration-scaled job calls its model's truth directly:
  fifo 41.5 -> 38.1 s CPU. Both changes: whole-trace summaries, rounds, sampled records and
  GPU timeline identical (fifo and tiresias-las), `--check-reference` 0 of 56 cells differ.
  Tried and not kept: an inlined steady-state `advance` (0.76 -> 0.57 us a call alone,
  nothing measurable on the trace: most advances cross an epoch). Left in fifo (38 s): per
  running job per stop, advancing (epochs included) ~40 %, views and decisions at the
  25,480 rounds with a waiting job ~35 %.
* Session of 2026-11-27 (sixth), same Intel machine: fifo's whole trace again. cProfile at
  1f9be16: 7.87 M advances and 7.86 M epoch crossings (3.93 M real, 3.93 M in the finish
  predictions' dry runs), 3.80 M views at 25,480 decisions, 2.39 M gradient-statistics
  measurements; `gc.callbacks` counted 3.4 s of 37.6 s in the cyclic collector (8,760 passes).
  Fixes, each exact:
  - The collector: `Simulator.run` paces its young generation at 100,000 allocations
    (`corral.sim.loop.gc_pacing`; switching it off measured the same), restored after the run.
  - Gradient statistics are reported to the estimator as (truth's reader, key) and read only
    when asked for (`JobEstimator.observe_grad_later`); fifo never asks.
  - The epoch loop runs in `advance` itself, on locals (the same operations in the same order).
  - `JobView.metrics` is a `MetricHistory` over the job's append-only list, not a tuple copy
    per view once it grew (the copies grew with the history).
  - `Reads.PLACEMENTS` (fifo): a job's earlier view is shown again while its status
    and assignment are unchanged (`SimJob.placement_view`); every decision is checked against
    fresh views in tests/policies/test_placement_views.py. This one was 17 % of the run.
  - A finished job sheds its metric history and estimator (`SimJob.shed_training`): peak RSS
    of the whole trace 790 -> 197 MiB alone.
  Side by side with 1f9be16, one per core (load ~2): fifo 39.6 -> 29.4 s CPU, tiresias-las
  56.2 -> 51.1 s CPU, same records, rounds and GPU timeline (pickled and compared byte for
  byte); `--check-reference` 0 of 56 cells differ. Alone: fifo 28.5 s, tiresias-las 47.9 s.
  The full benchmark an hour later (`benchmarks/results/bench_scale_483f629.json`, the host
  5-18 % slower by every figure both runs share) gave fifo 30.1 s, so three more exact fixes:
  fifo reads its views in one pass; the gradient-statistics key takes the total batch from
  `_rate` (`assign` now drops `_rate` before the batch choice measures, checked in
  tests/sim/test_job_caches.py); the GPU handover skips rebuilding placements at first starts,
  finishes and preemptions (`_lost`). Each step side by side with the commit before it: fifo
  31.7 -> 30.5 s CPU, then 29.5 -> 27.8 s CPU; alone 28.2 s (tiresias-las 54.6 s in the same run, at
  1f9be16 67.2 s side by side against 55.3 s now: the host's hour again), peak RSS 203 MiB.
  The busiest day under pollux is unchanged by these (py-spy of its first 3 hours: the jobs'
  throughput refits 47 %, reached through the agents' batch choice and `Pollux.problem`).
* Session of 2026-11-27 (seventh), same Intel machine: the busiest day under pollux, its fits.
  1,177 fits captured in the day's first hour at 3fb7132 (1,050 from the agents' batch choice
  at epoch ends, 127 from `Pollux.problem`; all distinct inputs): 24.2 s CPU, ~210 L-BFGS-B
  evaluations a fit at ~100 us each, ~70 us of it numpy's per-call overhead in the objective
  (~60 calls on 3-16 points). The objective now runs on Python floats with the array
  formulas' operations in the same order: + - * / and sqrt are correctly rounded either way,
  sums follow np.add.reduce's pairwise order (`corral.perf.numpy_order.numpy_sum`), and log,
  exp and logaddexp stay numpy's, one call each (np.exp's SIMD kernel differs from libm's exp
  in 4.7 % of a million draws here, so they cannot move to `math`). The driver compares
  points as float lists. The captured fits (`benchmarks/speed/bench_fits.py`): 24.2 -> 14.9 s CPU,
  and later in the session, the host faster, 12.1 -> 7.4 s; results byte-identical.
  Then py-spy of the first 3 hours: the agents' `GoodputFunction.optimize` of one allocation
  (at every epoch end) 13 %, ~100 us a call of array plumbing around a remembered candidate
  row; ints now take that row directly and pick on it (`_optimize_one`): 24 us, the same
  numbers (a test compares them with the array path bit for bit). Both exact: `--check-
  reference` 0 of 56 cells differ. Busiest day, before and after side by side, one per core:
  332.0 -> 297.3 s CPU (fits alone), then 349.1 -> 286.1 s CPU (both; 1.22x), same 1,661
  rounds and avg JCT 939 s; alone in the full run at 0d20594 (`benchmarks/results/
  bench_scale_0d20594.json`) 272.1 s, where fifo's whole trace took 26.4 s, tiresias-las's
  46.0 s, the optimus round 0.215 s and its day 5.4 s (optimus refits through the same fits).
  py-spy of the whole day after the fits' change: the search 38 %, fits 28 %, the agents'
  optimize 15 % (in the first 3 hours 13 % -> 8 % with `_optimize_one`), speedup tables 10 %. The
  pollux round median stays ~0.35 s: it is round 2, 10 generations of the search at ~32 ms;
  the rounds that refit went 0.41 -> 0.36 s and 0.67 -> 0.60 s. Still ~2.4x over 120 s for
  the day and 3.5x over 0.1 s for the round, with no part above 40 %: what is left needs the
  search and the fits compiled (bit-exact transcendental functions are the obstacle for the
  fits) or the reference figures renewed.
* Session of 2026-11-27 (eighth), same Intel machine: what the remaining pollux targets would
  take. The 2,000-job round's searches, captured and replayed: round 2 (the median) is 10
  generations at ~33 ms, of which numpy's random draws 13 % (timed through a proxy of the
  generator) and ~150 array passes over 100,000 slots and 100,000 (individual, job) entries
  the rest (cProfile: `mutate` 42 %, `repair` 28 %, `evaluate` 20 %; `_per_job`'s bincounts
  14 %, no single pass above that). py-spy of the day's first 3 hours: fits 35 % (the
  objective 24 %, the L-BFGS-B driver and scipy's step the rest), search 34 %, speed-up tables
  11 %, the agents' one-allocation optimize 7 %. So 0.1 s needs the search ~5x faster with
  the draws kept, where the compiled search of an earlier session gave 1.13x; and 120 s for
  the day needs the search and the fits each ~5x cheaper at once (both free would leave ~92 s).
  The fits' obstacle tested directly (`results/experiment_libm_numba_objective.patch`, not
  part of corral): the objective on libm's exp and log (`math`) in place of numpy's SIMD
  kernels changes the fits' last bits (digest 8985662c -> 8e08b105 on `bench_fits.py`'s
  captured inputs) but `--check-reference` says 0 of 56 cells differ; the busiest day then
  gives 1,659 rounds and avg JCT 928 s (939 s with numpy's kernels; seeds alone move it
  884-991 s). The same objective compiled with numba (0.68.1, about 6 s to compile): the
  1,177 captured fits 15.7-18.3 -> 5.8-6.0 s CPU (2.9x, alternating runs), and the busiest
  day, side by side one per core, 342.4 -> 268.4 s CPU (1.28x; 1,661 rounds, avg JCT 908 s)
  at an hour when this code took 342 s against 272 s in the last full run: about 213 s at
  that run's speed, still ~1.8x over 120 s. Not kept: a new compiled dependency for a
  quarter of one policy's day, whose large-cluster figures it moves, is the team's call.
* Session of 2026-11-29, same Intel machine, load average ~11 (six other sessions): issue 45.
  Pollux now places the jobs its search leaves out on the GPUs it leaves idle where FITNESS_p
  gains (`corral.policies.pollux.fill`; `--set pollux.fill_idle_gpus=false` switches it off)
  and does not search a round in which no job can gain (`corral.policies.pollux.settled`, on
  clusters above 64 nodes only, so the 16-node reference cells keep their draws: workload-1
  and -6 unchanged). Busiest day, before (637bccb) and after side by side, both nice'd
  (`benchmarks/results/bench_scale_day_pollux_2922fbd.txt`): 293.8 -> 264.3 s CPU (wall
  3,041 -> 2,908 s under that load), 1,661 -> 1,664 rounds, 11 rounds not searched, restarts
  per job 6.25 -> 4.48, average JCT 939 -> 1,097 s (+17 %: placing every waiting job on one
  GPU, as the objective prefers, is what bench_queues' docstring found costs average JCT on
  Philly's bursts), decide p50 0.51 -> 0.62 s and p99 8.8 -> 8.6 s wall. The 60 s target and
  "average JCT no worse" are not met. The whole trace under pollux (`--only trace
  --trace-policies pollux`, at 3c19715), started at nice 19 beside those runs, was stopped
  after 2,889 s wall with 5.7 % of the 74,428 jobs finished (1.4 % at 2,069 s, when the day
  runs ended and it got CPU; 1.4 -> 5.7 % in the last 820 s), far from the 30-minute target.
* Session of 2026-11-29 (second), same Intel machine: issue 45's pollux speed targets. Busiest
  day at 3782325, plain CPU timers around its parts (load ~3-8): 177.1 s CPU, of which the
  search 83.8 s, `Pollux.problem` 29.8 s (speed-up tables, and the fits it triggers), the
  throughput fits 43.6 s (agents' and policy's together), the engine and agents the rest.
  Per round (1,653 searches): 1,094 rounds had under 10 jobs (median 5 generations at
  4.4 ms each over ~105 nodes, 30.8 s), 240 had 100 jobs or more (12-17 ms a generation).
  206 of the searches (every 8th) replayed from their captured problem, generator state and
  warm start at other populations: 100 -> 50 / 30 / 16 individuals cost 11.9 -> 6.3 / 4.8 /
  3.2 s CPU, at a best fitness within 1 % of the 100's in 194 / 194 / 187 of the 206 (mean
  ratio 0.999 / 0.998 / 0.998; rounds of 200+ jobs lose the most, 0.96 mean at 24). Whole
  day, each rule patched in (CPU, avg JCT, restarts per job; the seeds alone move the avg JCT
  884-991 s): 2 per job in [16, 100] 168.3 s, 1,056 s, 4.47; in [16, 32] 138.7 s, 1,066 s,
  4.31; 16 always 151.9 s (another hour), 1,020 s, 4.21; 1 per job in [8, 32] 153.2 s,
  1,060 s, 4.23 -- the search's CPU 65.7 / 36.6 / 31.9 / 35.8 s. Kept: on clusters above 64
  nodes the population is 2 per job, between 16 and `pollux.large_population` (32; 0 = the
  artifact's 100 there too): `search_population`. The 16-node clusters (the eight Pollux
  workloads, the reference cells) keep 100, draw for draw. Side by side at 463295f
  (`benchmarks/results/bench_scale_day_pollux_463295f.txt`, load ~7): 192.8 -> 132.2 s CPU
  (1.46x; wall 637 -> 535 s under that load), 1,664 rounds both, avg JCT 1,097 -> 1,065 s,
  restarts per job 4.48 -> 4.31, decide p50 147 -> 79 ms, p99 1.81 -> 1.47 s.
  The patched trial of the kept rule, rerun beside the next one, gave the committed code's
  figures exactly (1,664 rounds, avg JCT 1,065.5 s, 4.311 restarts per job; 137.9 s CPU, the
  search 36.2 s). Tried and not kept, in that run: patience 3 in place of 5 on large
  clusters (scaled with time as `search_patience`): the search 36.2 -> 22.6 s, the day
  137.9 -> 127.3 s CPU, but avg JCT 1,124 s (above the 1,097 s before this session) and 4.44
  restarts per job.
  The whole trace under pollux at 463295f (`--only trace --trace-policies pollux`, bounded at
  2,100 s wall, load 2-11 with my day trials beside it for half of that): 11.8 % of the 74,428
  jobs finished after 2,081 s (its last progress line; projected ~14,700 s more), where the
  run at 3c19715 had 5.7 % after 2,889 s at nice 19 under load ~11. Far from 30 minutes: quiet
  rounds are still a search, a speed-up table refresh and the fits (above), ~150,000 rounds.
  Found in passing: the stored pollux reference cells of workload-2 and workload-8 differ at
  3782325 already (this change keeps 16-node clusters at 100 individuals; the same figures
  before and after it), e.g. avg JCT 3,459.8 -> 3,424.2 s and 3,097.6 -> 3,118.4 s, rounds
  962 -> 961 and 1,024 -> 1,021; workloads 1 and 3-7 match. Likely the idle-GPU fill (it
  applies on every cluster, and only workloads 1 and 6 were checked then): the reference
  cells need a decision (renew them, or confine the fill to large clusters).
  What is left, by a CPU-time cProfile (`cProfile.Profile(time.process_time)`) of the day's
  first 6 hours after the change (51.9 s): the throughput fits 28.3 s (55 %: 995 distinct
  fits, ~150 L-BFGS-B evaluations each; an adaptive job sees a new (N, K, m) whenever its
  batch choice moves, and each makes it stale), the search 7.4 s, the speed-up tables 4.9 s,
  the agents' one-allocation optimize 3.2 s. The fits alone (~44 s of the day) and the
  engine and agents (~30 s) are above the 60 s target: it needs the fits compiled or fewer
  of them (refitting on a new (N, K) only, say), both of which move every adaptive policy's
  stored reference figures -- the team's call, not taken here.
* Session of 2026-11-29 (third), same Intel machine, load 1 -> 21 (other sessions): issue 45,
  where the busiest day's pollux CPU goes, measured by CPU-time sampling (SIGPROF every 2 ms of
  process CPU, stacks counted) rather than cProfile: cProfile counts every C call (21.8 M
  `list.append` in the fits' objective over the day's first 1,000 jobs) and so inflates the
  fits (116.6 s CPU under cProfile against 47.2 s sampled, same run: 908 rounds, avg JCT
  1,398.0 s, 3.627 restarts per job). Sampled shares of those 47.2 s: the pollux search
  32.5 % (`mutate` 13.0, `repair` 8.0, `evaluate`'s `_per_job` ~2), the throughput fits 30.1 %
  (2,625 distinct fits of 5,285 asked, ~114 evaluations a fit), the speed-up tables 18.3 %
  (`best_goodputs` 15.7 %, of it the candidate rows 13.5 %, `candidate_rows` itself 7.6 %),
  the agents' one-allocation optimize 7.3 %. Per fit
  evaluation (`bench_fits.py --hours 3`: 620 fits, 166 evaluations a fit, 41-43 us an
  evaluation): the objective alone 18-25 us, so the L-BFGS-B driver (scipy's `setulb`
  included) and the objective's wrapper are the other half. Tried and
  not kept: the objective with its columns split once per fit and the sync terms computed
  for synced points only (exact: same fit digest bdc1d818447d4fec, the array-form test
  passes), but no faster (20.9-24.2 against 17.7-25.3 us a call, alternating in one process).
  No part is above a third, so the 60 s target (about 2.2x from 132 s) needs at least two of
  the search, the fits and the tables each made several times cheaper; bit-exact, that is
  compiled code with numpy's own exp/log for the fits, or the search's operators fused.
* Session of 2026-11-30 (`benchmarks/results/bench_scale_day_pollux_c05b0cf.txt`, quiet): the
  day in 124.3 s (fits 36 %, search 23.5 %, tables 21.7 %). Two result-moving shortcuts were
  measured and rejected: the fits' tolerances (`_LBFGSB_OPTIONS`) loosened to ftol 1e-10..1e-7
  cut evaluations from 145 to 80..20 a fit, but on 1 % of 1,015 captured fits the model's
  prediction off the measured configurations moved by up to 4.4x (the weakly regularised
  directions settle only at tight tolerances); patience 2 instead of 5 on the day's first six
  hours cut CPU 22.1 -> 13.5 s but took avg JCT 2,058 -> 3,035 s (jobs grow more slowly). The
  whole trace under pollux ran at 7.9 % of its jobs in 11 minutes (about 2.3 hours at that
  rate; `bench_scale_trace_pollux_partial_c05b0cf.txt`), its time the search (49 %) and the
  tables (30 %); its submissions span 106 days, over 150,000 rounds of 60 s.
* Session of 2026-11-30 (second), same Intel machine: pollux's search could not grow a job by
  one step at 100+ jobs (each offspring evicted ~55 jobs), so on large clusters jobs now grow
  into idle GPUs after it (`corral.policies.pollux.grow`), and a round whose current allocation,
  filled and grown, gives every job its best term is not searched (`settled`). Busiest day,
  beside other runs: 124.3 -> 57.0 s CPU, 1,499 of 1,647 rounds not searched, avg JCT 1,065 ->
  719 s, restarts per job 4.31 -> 3.18 (`benchmarks/results/bench_scale_day_pollux_d1bd9a2.txt`).
  The whole trace: see the closing note of that session and the results file it names.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
import numpy as np
from _common import POLLUX, machine, require

from corral.core import Cluster
from corral.policies import create_policy
from corral.sim.analysis.metrics import summarize
from corral.sim.loop.config import EngineConfig
from corral.sim.loop.engine import Simulator
from corral.sim.truth.catalog import CatalogTruth
from corral.sim.workloads import Workload, load_philly, synthetic

REPO = Path(__file__).resolve().parents[2]
SECTIONS = ("engine", "rounds", "day", "trace", "matrix")  # and "placement" (after only)
SEVEN = "fifo,srtf,tiresias-las,tiresias-gittins,optimus,optimus-oracle,pollux"
#: (figure, target in seconds or as a speed-up, "max" = at most / "min" = at least)
TARGETS: dict[str, tuple[float, str]] = {
    "trace fifo": (30.0, "max"), "trace tiresias-las": (60.0, "max"),
    "day pollux": (60.0, "max"), "day optimus": (60.0, "max"),  # pollux: issue 45 (18: 120 s)
    "trace pollux": (1800.0, "max"),  # issue 45
    "round optimus 4000 jobs 16000 GPUs": (0.4, "max"),
    "round pollux 2000 jobs 2048 GPUs": (0.1, "max"),
    "matrix speed-up, 2 processes": (1.8, "min"),
}


def at_zero(workload: Workload) -> Workload:
    """The same jobs, all submitted at t=0."""
    return Workload(workload.name + "-t0",
                    [dataclasses.replace(j, submit_time_s=0.0) for j in workload.jobs],
                    source=workload.source + ", all at t=0")


#: CPU seconds of the last `simulate` call: on a machine shared with other work, wall time
#: counts their share too, so every timed run also records its own CPU time ("... cpu").
CPU_S = [0.0]


def simulate(truth, policy, cluster: str, workload: Workload,
             max_time_s: float | None = None, on_progress=None) -> tuple[float, object]:
    """One run of `policy` (a name, or an instance); its wall time and result."""
    cfg = EngineConfig(max_time_s=max_time_s) if max_time_s is not None else EngineConfig()
    pol = create_policy(policy) if isinstance(policy, str) else policy
    started, cpu = time.perf_counter(), time.process_time()
    result = Simulator(truth, pol, Cluster.parse(cluster), cfg).run(workload, on_progress)
    CPU_S[0] = time.process_time() - cpu  # on a shared machine, this process's own CPU time
    return time.perf_counter() - started, result


class Progress:
    """A progress line on stderr at least every `every_s` seconds while a long run goes: the
    fraction of jobs finished (from the engine's hook), the time so far and the rate."""

    def __init__(self, label: str, every_s: float = 20.0) -> None:
        import threading

        self.label, self.every_s = label, every_s
        self.fraction = 0.0
        self.started = time.perf_counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __call__(self, fraction: float) -> None:
        self.fraction = fraction

    def __enter__(self) -> Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            spent = time.perf_counter() - self.started
            left = spent * (1 - self.fraction) / self.fraction if self.fraction > 0 else None
            print(f"  [{self.label}] {100 * self.fraction:5.1f} % of jobs finished, "
                  f"{spent:.0f} s so far" + ("" if left is None else
                                              f", about {left:.0f} s left at this rate"),
                  file=sys.stderr, flush=True)


def timed_decisions(policy_name: str) -> tuple[object, list[float]]:
    """A policy whose `decide` calls are timed into the returned list."""
    pol = create_policy(policy_name)
    times: list[float] = []
    decide = pol.decide

    def timed(snapshot):
        t = time.perf_counter()
        out = decide(snapshot)
        times.append(time.perf_counter() - t)
        return out
    pol.decide = timed  # type: ignore[method-assign]
    return pol, times


def round_times(truth, policy: str, cluster: str, workload: Workload, rounds: int) -> list[float]:
    """Seconds of each `decide` call over the first `rounds` rounds."""
    pol, times = timed_decisions(policy)
    simulate(truth, pol, cluster, workload, max_time_s=rounds * 60 - 1)
    return times


def whole_trace(truth) -> Workload:
    return load_philly(require(POLLUX / "philly.csv"), truth.limits(), start=0, hours=1e6)


def busiest_day(truth) -> Workload:
    return load_philly(require(POLLUX / "philly.csv"), truth.limits(), start=None, hours=24)


def section_engine(out: dict, args) -> None:
    truth = CatalogTruth()
    w = at_zero(synthetic(truth.limits(), num_jobs=2000, rate_per_hour=1000, seed=0))
    wall, result = simulate(truth, "tiresias-las", "2000x4", w, max_time_s=5 * 60 - 1)
    key = "engine tiresias-las 2000 jobs t=0 8000 GPUs 5 rounds"
    out[key], out[f"{key} cpu"] = wall, CPU_S[0]
    print(f"  engine: {wall:.1f} s ({CPU_S[0]:.1f} s CPU, {result.rounds} rounds)", flush=True)


def section_rounds(out: dict, args) -> None:
    truth = CatalogTruth()
    apps = truth.limits()
    for policy, jobs, cluster in (("optimus", 4000, "4000x4"), ("pollux", 2000, "512x4")):
        w = at_zero(synthetic(apps, num_jobs=jobs, rate_per_hour=1000, seed=0))
        times = round_times(truth, policy, cluster, w, args.rounds)
        gpus = Cluster.parse(cluster).total_gpus
        out[f"round {policy} {jobs} jobs {gpus} GPUs"] = statistics.median(times)
        print(f"  {policy} rounds ({jobs} jobs, {gpus} GPUs): median {statistics.median(times):.3f} s"
              f" over {len(times)}: {', '.join(f'{t:.2f}' for t in times)}", flush=True)


def timed_run(out: dict, key: str, label: str, truth, policy: str, workload: Workload,
              max_time_s: float | None = None, cluster: str = "512x4") -> None:
    """One simulation on `cluster` (default 512x4, 2,048 GPUs): its wall time under `key`, a
    line of its figures (restarts per job, the `decide` p50/p99 and the rounds not searched
    included), and a progress line on stderr at least every 20 s."""
    pol, times = timed_decisions(policy)
    with Progress(f"{label} {policy}") as progress:
        wall, result = simulate(truth, pol, cluster, workload, max_time_s=max_time_s,
                                on_progress=progress)
    s = summarize(result)
    out[key], out[f"{key} cpu"] = wall, CPU_S[0]
    out[f"{key} avg JCT s"] = s.avg_jct_s
    out[f"{key} restarts per job"] = s.restarts_per_job
    p50, p99 = (float(x) for x in np.percentile(times, [50, 99])) if times else (0.0, 0.0)
    out[f"{key} decide p50 s"], out[f"{key} decide p99 s"] = p50, p99
    settled = getattr(pol, "rounds_settled", None)  # pollux, since issue 45
    print(f"  {label} ({len(workload.jobs)} jobs) {policy}: {wall:.1f} s ({CPU_S[0]:.1f} s CPU), "
          f"{result.rounds} rounds, {len(times)} decisions (p50 {p50 * 1e3:.1f} ms, p99 "
          f"{p99 * 1e3:.1f} ms)" + ("" if settled is None else f", {settled} not searched")
          + f", avg JCT {s.avg_jct_s:.0f} s, restarts per job {s.restarts_per_job or 0:.2f}, "
          f"{s.finished} finished, {s.unfinished} unfinished", flush=True)


def section_day(out: dict, args) -> None:
    truth = CatalogTruth()
    day = busiest_day(truth)
    for policy in args.day_policies.split(","):
        timed_run(out, f"day {policy}", "busiest day", truth, policy, day)


def section_trace(out: dict, args) -> None:
    truth = CatalogTruth()
    trace = whole_trace(truth)
    for policy in args.trace_policies.split(","):
        timed_run(out, f"trace {policy}", "whole trace", truth, policy, trace,
                  max_time_s=args.trace_max_days * 86400, cluster=args.trace_cluster)
    out["trace peak RSS MiB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"  peak RSS of this process: {out['trace peak RSS MiB']:.0f} MiB", flush=True)


def window_cell(policy: str, start_s: float, hours: float) -> dict:
    """One window of the whole Philly trace (the jobs submitted in it, run to completion on an
    empty 512x4 cluster) under `policy`: its figures and its own CPU time and peak RSS. A
    runner's task (a worker process or a Ray task): never raises."""
    from corral.core.errors import InputError

    try:
        truth = CatalogTruth()
        try:
            window = load_philly(require(POLLUX / "philly.csv"), truth.limits(), start=start_s,
                                 hours=hours)
        except InputError:  # no jobs in this stretch of the trace
            return {"jobs": 0}
        wall, result = simulate(truth, policy, "512x4", window)
        s = summarize(result)
        return {"jobs": len(window.jobs), "finished": s.finished, "unfinished": s.unfinished,
                "jct_sum_s": s.avg_jct_s * s.finished, "rounds": result.rounds, "wall_s": wall,
                "cpu_s": CPU_S[0],
                "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    except Exception as exc:  # noqa: BLE001 - reported with its window, the others go on
        return {"error": f"{type(exc).__name__}: {exc}"}


def section_windows(out: dict, args) -> None:
    """The whole trace as a sweep of consecutive windows (`--window-hours`), each simulated on
    its own from an empty cluster, through the sweep's runners (`--window-jobs` processes, or
    Ray tasks with `--ray-address`): for the policies too slow to replay the trace in one piece
    on this machine. Not the same figures as one continuous run: a window's jobs never queue
    behind the previous window's."""
    from corral.sim.batch.sweep import runner_for

    # the last submission, seconds after the first (108.9 days for Philly)
    span_s = max(j.submit_time_s for j in whole_trace(CatalogTruth()).jobs)
    step = args.window_hours * 3600
    starts = [k * step for k in range(int(span_s // step) + 1)]
    runner = runner_for(args.window_jobs, args.ray_address)
    code = source_digest()
    for policy in args.window_policies.split(","):
        started = time.perf_counter()
        cells = kept_windows(args.window_results, code, policy, args.window_hours)
        todo = [k for k in range(len(starts)) if k not in cells]
        if cells:
            print(f"    {len(cells)} windows kept from {args.window_results} "
                  f"({sum(c.get('wall_s', 0.0) for c in cells.values()):.0f} s when they ran)",
                  flush=True)
        tasks = [(window_cell, (policy, starts[k], args.window_hours)) for k in todo]
        for i, cell in runner.run(tasks):
            index = todo[i]
            cells[index] = cell
            if "error" in cell:
                print(f"    window {index}: {cell['error']}", flush=True)
            elif args.window_results is not None:
                with args.window_results.open("a") as f:
                    f.write(json.dumps({"code": code, "policy": policy,
                                        "hours": args.window_hours, "index": index,
                                        "cell": cell}) + "\n")
            if cell.get("jobs") and len(cells) % 10 == 0:
                print(f"    {len(cells)}/{len(starts)} windows done, "
                      f"{time.perf_counter() - started:.0f} s", flush=True)
        wall = time.perf_counter() - started  # of this run (kept windows ran earlier)
        ran = [c for c in cells.values() if c.get("jobs")]
        finished = sum(c["finished"] for c in ran)
        key = f"windows {policy}"
        out[key] = wall
        out[f"{key} cpu"] = sum(c["cpu_s"] for c in ran)
        out[f"{key} jobs"] = sum(c["jobs"] for c in ran)
        out[f"{key} avg JCT s"] = sum(c["jct_sum_s"] for c in ran) / max(finished, 1)
        out[f"{key} windows kept"] = len(starts) - len(todo)
        out[f"{key} slowest window s"] = max((c["wall_s"] for c in ran), default=0.0)
        out[f"{key} peak RSS MiB"] = max((c["rss_mib"] for c in ran), default=0.0)
        failed = sum("error" in c for c in cells.values())
        print(f"  whole trace as {len(ran)} windows of {args.window_hours:g} h, {policy}: "
              f"{wall:.0f} s wall ({out[f'{key} windows kept']} windows kept from earlier "
              f"runs), {out[f'{key} cpu']:.0f} s CPU over the cells, "
              f"{out[f'{key} jobs']:.0f} jobs, {finished} finished, "
              f"{sum(c['unfinished'] for c in ran)} unfinished, {failed} window(s) failed, "
              f"avg JCT {out[f'{key} avg JCT s']:.0f} s, slowest window "
              f"{out[f'{key} slowest window s']:.0f} s, peak RSS of a cell "
              f"{out[f'{key} peak RSS MiB']:.0f} MiB", flush=True)


def code_identity() -> str:
    """What a --save records of the code measured: the digest of corral's files, not where they
    lie on this machine (code before `corral.sim.batch.cellstore` has no digest to give)."""
    try:
        return f"corral files {source_digest()}"
    except ImportError:
        return "corral before corral.sim.batch.cellstore (no file digest)"


def source_digest() -> str:
    """A digest of corral's files (`cellstore.code_digest`): window results of other code are
    not mixed in."""
    from corral.sim.batch.cellstore import code_digest

    return code_digest()[:16]


def kept_windows(path: Path | None, code: str, policy: str, hours: float) -> dict[int, dict]:
    """The windows of an earlier, interrupted sweep of this code, policy and window length in
    `path` (`--window-results`, one JSON line per finished window), by window index."""
    kept: dict[int, dict] = {}
    if path is None or not path.exists():
        return kept
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # a line cut short when the sweep was stopped
            continue
        if row.get("code") == code and row.get("policy") == policy and row.get("hours") == hours:
            kept[int(row["index"])] = row["cell"]
    return kept


def _cli_matrix(extra: list[str], policies: str) -> float:
    cmd = [sys.executable, "-c", "from corral.cli.main import main; main()", "simulate",
           "-w", str(POLLUX / "workloads"),
           "--profiles", str(POLLUX / "profiles"), "-p", policies, *extra]
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=1800)
    return time.perf_counter() - started


def section_matrix(out: dict, args) -> None:
    require(POLLUX / "workloads")
    policies = args.matrix_policies
    try:
        from corral.sim.batch.runners import ProcessRunner  # noqa: F401  (after the change only)
    except ImportError:
        from corral.sim.truth.profiles import ProfileTruth
        from corral.sim.workloads import load_workloads

        truth = ProfileTruth(POLLUX / "profiles")
        started = time.perf_counter()
        for w in load_workloads(POLLUX / "workloads", truth.limits()):
            for p in policies.split(","):
                simulate(truth, p, "16x4", w)
        out["matrix serial"] = time.perf_counter() - started
        print(f"  matrix serial (in-process loop): {out['matrix serial']:.1f} s", flush=True)
        return
    out["matrix serial"] = _cli_matrix(["--jobs", "1"], policies)
    print(f"  matrix serial: {out['matrix serial']:.1f} s", flush=True)
    out["matrix 2 processes"] = _cli_matrix(["--jobs", "2"], policies)
    out["matrix speed-up, 2 processes"] = out["matrix serial"] / out["matrix 2 processes"]
    print(f"  matrix --jobs 2: {out['matrix 2 processes']:.1f} s "
          f"({out['matrix speed-up, 2 processes']:.2f}x)", flush=True)
    from ray.cluster_utils import Cluster as RayCluster

    cluster = RayCluster(initialize_head=True, head_node_args=dict(
        num_cpus=1, include_dashboard=False, node_ip_address="127.0.0.1"))
    try:
        cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
        cluster.wait_for_nodes()
        # the head listens on loopback, where Ray reports the machine's outward address; the
        # CLI's driver reaches a loopback address as it is (corral.ray_connect)
        address = "127.0.0.1:" + cluster.address.rsplit(":", 1)[1]
        out["matrix Ray 2 nodes"] = _cli_matrix(["--ray-address", address], policies)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        print(f"  matrix on Ray failed: {exc}", flush=True)
        return
    finally:
        cluster.shutdown()
    out["matrix speed-up, Ray 2 nodes"] = out["matrix serial"] / out["matrix Ray 2 nodes"]
    print(f"  matrix on Ray (2 local nodes, 1 CPU each): {out['matrix Ray 2 nodes']:.1f} s "
          f"({out['matrix speed-up, Ray 2 nodes']:.2f}x)", flush=True)


def section_placement(out: dict, args) -> None:
    """Optimus's Theorem-1 placement of 4,000 jobs (1-16 GPUs) one after another on 4000x4:
    the per-job sort (`fewest_nodes_even`) against the bucketed `EvenPlacer`, same placements."""
    import numpy as np

    from corral.policies.optimus import EvenPlacer, fewest_nodes_even
    from corral.policies.placement import take

    sizes = np.random.default_rng(0).choice([1, 1, 1, 2, 4, 8, 16], size=4000).tolist()
    placed = {}
    for name, make in (("sort per job", lambda: fewest_nodes_even), ("EvenPlacer", EvenPlacer)):
        free, place, got = [4] * 4000, make(), []
        started = time.perf_counter()
        for k in sizes:
            got.append(place(free, k))
            if got[-1] is not None:
                take(free, got[-1])
        placed[name] = got
        out[f"placement 4000 jobs 4000x4, {name}"] = time.perf_counter() - started
        print(f"  placement, {name}: {out[f'placement 4000 jobs 4000x4, {name}']:.3f} s", flush=True)
    assert placed["sort per job"] == placed["EvenPlacer"], "EvenPlacer placed differently"


RUNNERS: dict[str, Callable[[dict, argparse.Namespace], None]] = {
    "placement": section_placement, "engine": section_engine, "rounds": section_rounds, "day": section_day,
    "trace": section_trace, "matrix": section_matrix, "windows": section_windows,
}


def check_reference() -> int:
    """Every (policy, workload) cell of the stored pre-change run against this code; the number
    of cells that differ (the CI test checks a subset, tests/sim/test_reference.py). Each cell
    runs in a child process with the stored run's numpy kernels (reference_run.numerics_env)."""
    sys.path.insert(0, str(REPO / "tests" / "sim"))
    from reference_run import figures_in_subprocess, load_reference

    differ = 0
    for policy, cells in load_reference().items():
        for workload, stored in cells.items():
            started = time.perf_counter()
            now = figures_in_subprocess([(policy, workload)])[(policy, workload)]
            bad = {k: (v, now.get(k)) for k, v in stored.items() if now.get(k) != v}
            differ += bool(bad)
            print(f"{policy:17s} {workload}: {'same' if not bad else f'DIFFERS {bad}'} "
                  f"({time.perf_counter() - started:.1f} s)", flush=True)
    print(f"{differ} cell(s) differ")
    return differ


def table(after: dict, before: dict) -> str:
    lines = [f"{'figure':58s} {'after':>10s} {'before':>10s} {'ratio':>8s}  target"]
    for key, value in after.items():
        old = before.get(key)
        speedup = "speed-up" in key or "RSS" in key
        ratio = "" if old is None or speedup or value == 0 else f"{old / value:.1f}x"
        target = TARGETS.get(key)
        verdict = ""
        if target is not None:
            limit, kind = target
            ok = value <= limit if kind == "max" else value >= limit
            verdict = f"{'<=' if kind == 'max' else '>='} {limit:g} {'met' if ok else 'NOT met'}"
        fmt = (lambda v: f"{v:.2f}x") if "speed-up" in key else (lambda v: f"{v:.3f}")
        lines.append(f"{key:58s} {fmt(value):>10s} {fmt(old) if old is not None else '-':>10s} "
                     f"{ratio:>8s}  {verdict}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(SECTIONS))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--day-policies", default="tiresias-las,optimus,pollux")
    ap.add_argument("--trace-policies", default="fifo,tiresias-las")
    ap.add_argument("--trace-cluster", default="512x4",
                    help="cluster of the whole-trace runs, e.g. a three-type one for sia: "
                         "k80:256x4,p100:128x4,v100:128x4")
    ap.add_argument("--trace-max-days", type=float, default=3650.0,
                    help="horizon of the whole-trace runs (both sides), days")
    ap.add_argument("--matrix-policies", default=SEVEN)
    ap.add_argument("--window-policies", default="pollux")
    ap.add_argument("--window-hours", type=float, default=24.0)
    ap.add_argument("--window-jobs", type=int, default=os.cpu_count() or 1,
                    help="worker processes of the `windows` sweep")
    ap.add_argument("--window-results", type=Path, default=None,
                    help="keep each finished window here (JSON lines) and skip the windows an "
                         "earlier run of the same code kept: a sweep that resumes")
    ap.add_argument("--ray-address", default=None,
                    help="run the `windows` sweep as Ray tasks on this cluster instead")
    ap.add_argument("--save", type=Path, help="write the figures here (JSON)")
    ap.add_argument("--before", type=Path, help="a --save of the code before, for ratios")
    ap.add_argument("--show", type=Path, help="only print the table of this --save (with --before)")
    ap.add_argument("--check-reference", action="store_true",
                    help="only compare every cell of tests/sim/data/reference_summaries.json")
    args = ap.parse_args()
    if args.check_reference:
        raise SystemExit(check_reference())
    if args.show:
        print(table(_figures(args.show), _figures(args.before)))
        return

    import corral

    load = os.getloadavg()
    print(f"machine: {machine()}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"code: {Path(corral.__file__).parent} ({code_identity()})")
    out: dict[str, float] = {}
    for name in args.only.split(","):
        print(f"[{name}]", flush=True)
        RUNNERS[name](out, args)
    if args.save:
        doc = {"machine": machine(), "load": os.getloadavg(), "code": code_identity(),
               "figures": out}
        if args.save.exists():
            old = json.loads(args.save.read_text())
            doc["figures"] = {**old.get("figures", {}), **out}
        args.save.write_text(json.dumps(doc, indent=1) + "\n")
    print(table(out, _figures(args.before)))


def _figures(path: Path | None) -> dict:
    """The figures of a --save file ({} when there is none yet)."""
    return json.loads(path.read_text())["figures"] if path is not None and path.exists() else {}


if __name__ == "__main__":
    main()
