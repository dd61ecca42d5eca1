"""BigDL runner (DistriOptimizer on a Spark standalone cluster started per run, or shared by
a study's runs: ``cluster: per_study``, ``shared_cluster``).

Importing this package imports neither pyspark nor BigDL; ``launcher`` stays light for the
DAG, and ``train`` imports them only inside ``train(ctx)``.
"""
