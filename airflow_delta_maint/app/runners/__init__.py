"""Where a job's parallel work runs: the task runners (as Spark tasks, on threads of this process, or
as Python over Spark Connect) and the functions VACUUM runs in them. Imports no pyspark and no pyarrow
here: a Spark task that lists or deletes loads little more than obstore."""
