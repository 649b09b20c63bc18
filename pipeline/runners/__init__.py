"""Running the build: Beam's pipeline options, the runner they name and the check that refuses an
unknown flag (`options.py`), and bertbeam's DaskRunner (`dask_runner.py`, the cluster; its graph
translation in `dask_translate.py`). Every use of Beam's private API lives in this folder, beside
the upstream behaviour it works around."""
