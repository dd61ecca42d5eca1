"""Caffe runner (pycaffe + MPI Allreduce, like Caffe-oMPI). Importing this package imports neither caffe nor mpi4py."""
