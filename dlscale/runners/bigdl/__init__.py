"""BigDL runner (DistriOptimizer on a Spark standalone cluster started per run).

Importing this package imports neither pyspark nor BigDL; ``launcher`` stays light for the
DAG, and ``train`` imports them only inside ``train(ctx)``.
"""
