"""TensorFlow runner (MultiWorkerMirroredStrategy or ParameterServerStrategy).

Importing this package does not import tensorflow: ``launcher`` and ``cluster`` are read
when Snakemake builds the DAG and when the launcher plans a run.
"""
