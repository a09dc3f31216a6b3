"""Code that runs inside Spark tasks, and the messages it exchanges with the driver.

Nothing here imports pyspark: executors import these modules (shipped with the package), and the
driver imports the messages. ``bootstrap`` is shipped by value inside each task, so it answers even
where this package cannot be imported.
"""
