"""Code that runs inside Spark tasks: plain Python on pyarrow, no pyspark (imports nothing heavy here)."""
