"""Ground truth of simulated jobs: measured profiles in the Pollux format or the built-in
catalog behind one interface (`base.Truth`), chosen by `source`; `calibrate` fits a catalog."""
